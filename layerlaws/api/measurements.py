"""What the notebook API measures of a model in memory, through the same library functions
the pipeline uses: the equi-learning pass over texts (``equilearning_law``), the
probability signatures of texts against the model's embeddings (``signatures``), the block
coupling of a prompt (``coupling``) and a random twin of the model (``random_twin``).

``model`` is a Hugging Face model of a family in the architecture table
(``layerlaws.models.architectures``), ``tokenizer`` its tokenizer. Nothing is written to
disk but DuckDB's temporary files while counting.
"""

from __future__ import annotations

import tempfile
from collections.abc import Collection, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import polars as pl
import torch

from layerlaws.core.settings import schema_at
from layerlaws.coupling.measurement import (
    COUPLING_KINDS,
    PromptMeasurement,
    TokenCoupling,
    measure_prompt,
    require_ks_within,
)
from layerlaws.coupling.settings import CouplingSettings
from layerlaws.equilearning.equilearning_pass import EquilearningPass
from layerlaws.equilearning.law import fuzziness_law_table, law_table
from layerlaws.equilearning.settings import EquilearningSettings, observer_specs
from layerlaws.forward.observers import ObserverSpec
from layerlaws.forward.span_corruption import Seq2SeqVocabulary
from layerlaws.models.facts import model_facts
from layerlaws.models.loading import randomly_initialised_twin
from layerlaws.signatures.comparison import SignatureComparison, compare_with_embeddings
from layerlaws.signatures.counting import connect, count_tokens
from layerlaws.signatures.settings import SignatureSettings
from layerlaws.text.tokens import tokenize_corpus, tokenize_prompts, tokenize_sentences

SHARD_TEXTS = schema_at("execution.shard_texts")["default"]
"""Texts per token shard while counting (``execution.shard_texts``)."""


def _dataset_default(key: str) -> Any:
    return schema_at(f"datasets.*.{key}")["default"]


@dataclass(frozen=True)
class Texts:
    """Probing texts and how they are tokenised, as a dataset of the config says
    (``datasets.<key>``: ``max_tokens`` per text, special tokens counted; ``min_tokens``
    text tokens at least; ``too_long``: truncate, drop or error; ``token_budget``: text
    tokens in all, None for every text); a plain list of texts is read with the schema's
    defaults. ``Config.texts`` gives a dataset's sample."""

    texts: Sequence[str]
    max_tokens: int = field(default=_dataset_default("max_tokens"))
    min_tokens: int = field(default=_dataset_default("min_tokens"))
    too_long: str = field(default=_dataset_default("too_long"))
    token_budget: int | None = field(default=_dataset_default("token_budget"))

    @classmethod
    def of(cls, texts: Sequence[str] | Texts) -> Texts:
        """``texts`` as given, or a plain list under the schema's defaults."""
        return texts if isinstance(texts, Texts) else cls(tuple(texts))

    def tokens(self, tokenizer: Any, max_positions: int | None) -> pl.DataFrame:
        """The token table of the texts (``layerlaws.text.tokens.tokenize_sentences``),
        capped at the model's context ``max_positions``."""
        sentences = pl.DataFrame(
            {"sentence_id": range(len(self.texts)), "text": list(self.texts), "source": "api"},
            schema={"sentence_id": pl.Int64, "text": pl.String, "source": pl.String},
        )
        return tokenize_sentences(
            sentences,
            tokenizer,
            self.max_tokens,
            self.min_tokens,
            self.token_budget,
            self.too_long,
            max_positions,
        )


@dataclass(frozen=True)
class Law:
    """The pass's tables, with the columns of the pipeline's files: ``pr`` (``pr.csv``) and
    its fit ``law`` (``law.csv``), ``fuzziness`` and its fit ``fuzziness_law``
    (``fuzziness.csv``, ``fuzziness_law.csv``), ``token_views`` (``token_views.csv``),
    ``evaluation`` (``evaluation/…csv``: the model's own held-out loss, NaN where its head
    is not evaluated), the pass's ``report`` (rows, tokens, rate, probe), and the named
    observers' tables by name (``observers/<name>.csv``)."""

    pr: pl.DataFrame
    law: pl.DataFrame
    fuzziness: pl.DataFrame
    fuzziness_law: pl.DataFrame
    token_views: pl.DataFrame
    evaluation: pl.DataFrame
    report: dict[str, Any]
    observers: dict[str, pl.DataFrame]


@dataclass(frozen=True)
class Coupling:
    """One prompt's coupling as polars tables with the columns of the pipeline's files:
    ``depth`` (``depth.csv``), ``tokens`` (``tokens.csv``), ``trajectories``
    (``trajectories/tokens.csv``), ``layers`` (``trajectories/layers.csv``) and
    ``singular_values``; ``measured``: everything, arrays included."""

    depth: pl.DataFrame
    tokens: pl.DataFrame
    trajectories: pl.DataFrame
    layers: pl.DataFrame
    singular_values: pl.DataFrame
    measured: PromptMeasurement


def equilearning_law(
    model: Any,
    tokenizer: Any,
    texts: Sequence[str] | Texts,
    settings: EquilearningSettings | None = None,
    *,
    batch_size: int | str = "auto",
    probe: str = "auto",
    progress: bool = True,
    observers: Sequence[ObserverSpec | str] = (),
) -> Law:
    """The equi-learning pass of the pipeline (``EquilearningPass``) over ``texts``
    (tokenised as ``Texts`` says): PR of every layer (0…L) for each target offset, norm and
    control, and its log-linear fit over layers 1…L (He & Su); separation fuzziness and its
    fit; the token views; the model's own held-out loss, under ``settings`` (default: the
    schema's, ``EquilearningSettings()``; ``Config.equilearning`` for a config's, e.g.
    ``EquilearningSettings(offsets=(1,), norms=("model",))`` for the law alone).
    ``batch_size`` sequences a batch (``auto``: from the device's free memory), ``probe``
    as ``models.<key>.probe``. The model runs where its weights are, logging its progress
    unless ``progress`` is False. ``observers`` are measured in the same pass: a built-in's
    name (``"geometry"``, under its default settings) or an ``ObserverSpec(name,
    YourClass, settings)`` (``Config.observers`` for a config's); their tables are
    ``Law.observers``. Raises LayerlawsError when an offset has no more rows than the
    hidden size (sample more or longer texts)."""
    facts = model_facts(model, {"kind": "memory"})
    settings = settings or EquilearningSettings()
    seq2seq = None
    if getattr(model.config, "is_encoder_decoder", False):
        seq2seq = Seq2SeqVocabulary.of(tokenizer, model.config.decoder_start_token_id)
    named = [
        observer
        if isinstance(observer, ObserverSpec)
        else observer_specs({"observers": [observer]})[0]
        for observer in observers
    ]
    tokens = Texts.of(texts).tokens(tokenizer, facts.max_positions)
    pass_ = EquilearningPass.prepare(tokens, facts, tokenizer, settings, probe, seq2seq, named)
    device = str(next(model.parameters()).device)
    report = pass_.run(model, batch_size, device, progress=progress)
    tables = pass_.tables()
    return Law(
        pr=tables["pr"],
        law=law_table(tables["pr"]),
        fuzziness=tables["fuzziness"],
        fuzziness_law=fuzziness_law_table(tables["fuzziness"]),
        token_views=tables["token_views"],
        evaluation=tables["evaluation"],
        report={**report, "probe": pass_.probe},
        observers=pass_.observers.named_tables(),
    )


def random_twin(model: Any, seed: int = 0) -> Any:
    """A model of ``model``'s architecture and config with freshly initialised weights
    (``seed``; a coupling run's is ``coupling.init_seed``), placed and quantised like it:
    the pipeline's control of an untrained network (He & Su's random initialisation;
    Aubry et al.'s random-weights baseline)."""
    return randomly_initialised_twin(model, seed)


def signatures(
    model: Any,
    tokenizer: Any,
    texts: Sequence[str] | Texts,
    settings: SignatureSettings | None = None,
    *,
    memory_limit_mb: int = schema_at("execution.duckdb_memory_mb")["default"],
) -> SignatureComparison:
    """Count the unigrams and bigrams of ``texts`` (whole, untruncated, up to the
    ``Texts``' token budget; ``Config.corpus`` gives a dataset's whole source, as the
    pipeline counts it) and compare their signatures with the model's input and output
    embeddings under ``settings`` (default: the schema's, ``SignatureSettings()``):
    ``rcos``, ``per_token``, ``percentiles``, ``percentile_bins``, ``views``, ``summary``
    as the pipeline writes them."""
    counted = Texts.of(texts)
    with tempfile.TemporaryDirectory() as folder:
        root = Path(folder)
        # As a signature run tokenises a corpus: whole texts, up to the token budget.
        tokenize_corpus(
            ((text, "api") for text in counted.texts),
            tokenizer,
            root / "shards",
            shard_texts=SHARD_TEXTS,
            token_budget=counted.token_budget,
        )
        connection = connect(memory_limit_mb, root / "spill", threads=2)
        shards = sorted((root / "shards").glob("*.parquet"))
        count_tokens(connection, shards, root / "u.parquet", root / "b.parquet")
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
        settings=settings or SignatureSettings(),
    )


def coupling(
    model: Any,
    tokenizer: Any,
    prompt: str,
    settings: CouplingSettings | None = None,
    *,
    max_tokens: int | None = None,
    too_long: str = "truncate",
    kinds: Collection[str] = COUPLING_KINDS,
) -> Coupling:
    """The ``kinds`` of one prompt (``layerlaws.coupling.measurement.COUPLING_KINDS``, all
    by default: ``depth``, ``tokens``, ``trajectories``, ``logit_lens``) as the pipeline's
    tables have them (``depth``, ``tokens``, ``trajectories``, ``layers``; a kind not
    measured leaves its table empty) under ``settings`` (default: the schema's,
    ``CouplingSettings()``: K = 10, 30, 50, Aubry et al.'s m̃ and m). The prompt is cut to
    ``max_tokens`` tokens as a prompt set's are (``too_long``; None: whole, up to the
    model's context); ``Config.prompts`` gives a set's texts and limits. Load the model with
    ``attn_implementation="eager"`` (``Config.load_model(..., attention="eager")``): the
    fused attention kernels have no batching rule for the Jacobians."""
    facts = model_facts(model, {"kind": "memory"})
    limit = max_tokens or facts.max_positions or 10**12
    (ids,), _ = tokenize_prompts([prompt], tokenizer, limit, too_long, facts.max_positions)
    settings = settings or CouplingSettings()
    require_ks_within(settings, facts.hidden_size)
    device = next(model.parameters()).device
    measured = measure_prompt(
        model,
        torch.tensor([ids], device=device),
        token_coupling=TokenCoupling.of(settings, facts.num_layers),
        settings=settings,
        kinds=kinds,
    )
    return Coupling(
        depth=pl.DataFrame(measured.depth),
        tokens=pl.DataFrame(measured.tokens),
        trajectories=pl.DataFrame(measured.trajectories),
        layers=pl.DataFrame(measured.layers),
        singular_values=pl.DataFrame(measured.singular_values),
        measured=measured,
    )
