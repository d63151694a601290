"""How much of its corpus a training reads, for ``snakemake estimate``: the tokens of its
steps against its dataset's sample and that sample's source (Yao & Xu train one epoch of
each corpus), before anything is sampled or packed."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from layerlaws.training.plan import TrainingSpec


def corpus_line(
    key: str,
    settings: Mapping[str, Any],
    dataset: Mapping[str, Any],
    packed: Mapping[str, Any] | None = None,
) -> str:
    """One line on training ``key`` (its ``training.<key>`` block ``settings``): the tokens
    it reads; its corpus (one epoch's sequences, or the whole sample); the sample's tokens,
    from ``packed`` (the packed corpus's facts, once it exists) or else estimated from the
    dataset's ``source_size`` (mean tokens per document × its texts); and the share of the
    source they are. Sizes without a source are said to be unknown until packing."""
    spec = TrainingSpec.of(settings)
    name = settings["dataset"]
    tokens = spec.tokens_seen(spec.steps)
    line = (
        f"training {key}: {tokens:,} tokens ({spec.steps:,} steps × {spec.batch_size} × "
        f"{spec.context:,})"
    )
    if spec.epochs is not None:
        line += f", {spec.epochs} epoch(s) of {tokens // spec.epochs:,} tokens of {name}"
    source = dataset.get("source_size")
    texts = dataset["n_samples"]
    if packed is not None:
        sample = packed["corpus_tokens"]
        line += f"; its packed corpus holds {sample:,} tokens"
    elif source is not None and texts != "all":
        sample = texts * source["tokens"] // source["documents"]
        line += f"; {name}'s sample of {texts:,} texts holds ≈ {sample:,} tokens"
    else:
        return line + f"; {name}'s sample is sized when packed (its corpus.json)"
    if spec.epochs is None:
        line += f" (the training reads it {tokens / sample:.2f} times)"
    elif sample < tokens // spec.epochs:
        line += f", fewer than an epoch needs: raise datasets.{name}.n_samples"
    if source is not None:
        line += f"; the source holds ≈ {source['tokens']:,} ({tokens / source['tokens']:.2%} read)"
    return line
