"""A short public API for a model already in memory (a notebook), through the same library
functions the pipeline uses: the law of equi-learning on a list of texts, the probability
signatures of texts against the model's embeddings, the block coupling of a prompt.

``model`` is a Hugging Face model of a family in the architecture table
(``layerlaws.models.architectures``), ``tokenizer`` its tokenizer. Nothing is written to disk
but DuckDB's temporary files while counting.
"""

from __future__ import annotations

import tempfile
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import polars as pl

from layerlaws.coupling.measurement import PromptMeasurement, TokenCoupling, measure_prompt
from layerlaws.coupling.settings import CouplingSettings
from layerlaws.equilearning.law import law_table
from layerlaws.equilearning.statistics import EquilearningStatistics, present_ids
from layerlaws.forward.model_pass import run_forward_pass
from layerlaws.models.facts import model_facts
from layerlaws.signatures.comparison import SignatureComparison, compare_with_embeddings
from layerlaws.signatures.counting import connect, count_tokens
from layerlaws.signatures.settings import SignatureSettings
from layerlaws.text.tokens import tokenize_sentences, with_successors


@dataclass(frozen=True)
class Law:
    """``pr``: the columns of ``pr.csv``; ``law``: those of ``law.csv``."""

    pr: pl.DataFrame
    law: pl.DataFrame


def _tokens(texts: Sequence[str], tokenizer: Any, max_tokens: int | None) -> pl.DataFrame:
    sentences = pl.DataFrame(
        {"sentence_id": range(len(texts)), "text": list(texts), "source": "api"},
        schema={"sentence_id": pl.Int64, "text": pl.String, "source": pl.String},
    )
    return tokenize_sentences(sentences, tokenizer, max_tokens or 10**9, min_tokens=1)


def equilearning_law(
    model: Any,
    tokenizer: Any,
    texts: Sequence[str],
    offsets: Sequence[int] = (1,),
    norms: Sequence[str] = ("model",),
    controls: Sequence[str] = ("none",),
    max_tokens: int = 512,
    batch_size: int = 8,
) -> Law:
    """PR of every layer (0…L) for each target offset, norm and control over ``texts``,
    and its log-linear fit over layers 1…L; the model runs where its weights are. The
    ``shuffled_vocab`` control permutes each offset's present targets (He & Su's code)."""
    facts = model_facts(model, {"kind": "memory"})
    tokens = _tokens(texts, tokenizer, max_tokens)
    statistics = EquilearningStatistics(
        facts, offsets, norms, controls, shuffle_seed=0, present=present_ids(tokens, offsets)
    )
    device = str(next(model.parameters()).device)
    run_forward_pass(model, facts, tokens, [statistics], batch_size, device, progress=False)
    pr = statistics.table()
    return Law(pr, law_table(pr))


def signatures(
    model: Any,
    tokenizer: Any,
    texts: Sequence[str],
    top_tokens: int = 2000,
    memory_limit_mb: int = 2000,
) -> SignatureComparison:
    """Count the unigrams and bigrams of ``texts`` (whole, untruncated) and compare their
    signatures with the model's input and output embeddings: ``rcos``, ``per_token``,
    ``percentiles``, ``percentile_bins``, ``views``, ``summary`` as the pipeline writes them."""
    tokens = with_successors(_tokens(texts, tokenizer, None))
    with tempfile.TemporaryDirectory() as folder:
        root = Path(folder)
        tokens.write_parquet(root / "shard.parquet")
        connection = connect(memory_limit_mb, root / "spill", threads=2)
        count_tokens(connection, [root / "shard.parquet"], root / "u.parquet", root / "b.parquet")
        unigrams, bigrams = pl.read_parquet(root / "u.parquet"), pl.read_parquet(root / "b.parquet")
    input_embeddings = model.get_input_embeddings().weight
    output_embeddings = model.get_output_embeddings().weight
    return compare_with_embeddings(
        unigrams,
        bigrams,
        input_embeddings=input_embeddings.detach().float().cpu().numpy(),
        output_embeddings=output_embeddings.detach().float().cpu().numpy(),
        tied=output_embeddings is input_embeddings,
        decode=lambda token: tokenizer.decode([token]),
        settings=SignatureSettings(top_tokens=top_tokens),
    )


def coupling(
    model: Any,
    tokenizer: Any,
    prompt: str,
    ks: Sequence[int] = (10,),
    token_layers: Sequence[int | Sequence[int]] = (),
    lss_window: int = 11,
    metrics: Sequence[str] = ("paper",),
) -> PromptMeasurement:
    """Depth-wise and token-wise coupling and the trajectory of one prompt (rows of
    ``depth``, ``tokens``, ``trajectories``, ``layers`` as in the pipeline's tables), by the
    coupling ``metrics`` (``paper``, Aubry et al.'s Eq. 14, and the released code's
    ``released_trace``, ``released_norm``, ``released_trace_swapped``,
    ``released_norm_swapped``). Load the model with ``attn_implementation="eager"``: the
    fused attention kernels have no batching rule for the Jacobians."""
    ids = tokenizer(prompt, return_tensors="pt")["input_ids"]
    facts = model_facts(model, {"kind": "memory"})
    settings = CouplingSettings(
        ks=tuple(ks),
        token_layers=tuple(token_layers),
        lss_window=lss_window,
        metrics=tuple(metrics),
    )
    device = next(model.parameters()).device
    return measure_prompt(
        model,
        ids.to(device),
        token_coupling=TokenCoupling.of(settings, facts.num_layers),
        settings=settings,
    )
