"""How much a training reads, for the plan and ``snakemake estimate``, before anything is
sampled or packed: its corpus in packed sequences (from its packed corpus's facts once
they exist, else from its token budget or its dataset's assumed ``source_size``), the
tokens its steps read, and that corpus's share of the dataset's source (Yao & Xu train
one epoch of each whole Pile subset, §6 and Appendix A)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from layerlaws.training.packing import sequence_dtype
from layerlaws.training.plan import TrainingSpec

KNOWN = {
    "packed": "packed",
    "budget": "its token budget",
    "source": "assumed from datasets.{name}.source_size; exact once packed",
    "sample": "assumed from n_samples × datasets.{name}.source_size; exact once packed",
}
"""How a corpus's sequences are known (``corpus_sequences``), in words."""


def corpus_sequences(
    settings: Mapping[str, Any], dataset: Mapping[str, Any], packed: Mapping[str, Any] | None
) -> tuple[int | None, str | None]:
    """(packed sequences of the corpus of the training ``settings`` on ``dataset``, how
    they are known: a key of ``KNOWN``): from ``packed`` (its corpus.json) once it exists;
    else the whole source's ``source_size`` tokens, or a sample's share of them (n_samples
    × tokens / documents), in sequences of its context, cut to its token budget's; a
    token budget's alone when the source's size is not given. (None, None) when nothing
    says."""
    spec = TrainingSpec.of(settings)
    if packed is not None:
        return packed["sequences"], "packed"
    source, texts = dataset.get("source_size"), dataset["n_samples"]
    whole, known = None, None
    if source is not None and spec.corpus == "source":
        whole, known = source["tokens"] // spec.context, "source"
    elif source is not None and texts != "all":
        whole, known = texts * source["tokens"] // source["documents"] // spec.context, "sample"
    budget = spec.budget_sequences
    if budget is not None and (whole is None or whole >= budget):
        return budget, "budget"
    return whole, known


def planned_tokens(
    settings: Mapping[str, Any], dataset: Mapping[str, Any], packed: Mapping[str, Any] | None
) -> int:
    """Training tokens the training ``settings`` reads: with epochs E, every sequence of its
    corpus E times (``corpus_sequences``; steps × batch_size a step while unknown);
    without, steps × batch_size × context."""
    spec = TrainingSpec.of(settings)
    sequences, _ = corpus_sequences(settings, dataset, packed)
    return spec.tokens_seen(spec.steps, sequences if spec.epochs is not None else None)


def corpus_line(
    key: str,
    settings: Mapping[str, Any],
    dataset: Mapping[str, Any],
    vocab_size: int,
    packed: Mapping[str, Any] | None = None,
) -> str:
    """One line on training ``key`` (its ``training.<key>`` block ``settings``, on
    ``dataset``, over a vocabulary of ``vocab_size``): the tokens it reads in its steps,
    and how many sequences a step; its corpus (the sample or the whole source, a token
    budget's part of it, epochs) and that corpus's size, how it is known, and its disk;
    the share of the dataset's source (``source_size``) it is."""
    spec = TrainingSpec.of(settings)
    name = settings["dataset"]
    sequences, known = corpus_sequences(settings, dataset, packed)
    tokens = planned_tokens(settings, dataset, packed)
    per_step = f"{spec.batch_size}"
    if spec.epochs is not None:
        per_step = (
            f"{spec.batch_size} (as planned; batch_size {spec.batch_size})"
            if sequences is None
            else f"≈ {sequences * spec.epochs / spec.steps:.1f} (batch_size {spec.batch_size})"
        )
    corpus = f"{name}'s {'whole source' if spec.corpus == 'source' else 'sample'}"
    if spec.budget_sequences is not None:
        corpus = (
            f"the first {spec.budget_sequences:,} sequences of {corpus} (token_budget "
            f"{spec.token_budget:,})"
        )
    if spec.epochs is not None:
        corpus = f"{spec.epochs} epoch(s) of {corpus}"
    line = (
        f"training {key}: {tokens:,} tokens in {spec.steps:,} steps of {per_step} sequences "
        f"of {spec.context:,}: {corpus}"
    )
    if sequences is None:
        return line + "; sized when packed (its corpus.json)"
    disk = sequences * spec.context * sequence_dtype(vocab_size).itemsize
    line += (
        f", {sequences:,} sequences ({KNOWN[known].format(name=name)}), {disk / 1e9:,.3g} GB "
        f"on disk"
    )
    if spec.epochs is None:
        line += f"; the training reads it {spec.steps * spec.batch_size / sequences:.2f} times"
    elif spec.budget_sequences is not None and sequences < spec.budget_sequences:
        fix = (
            "lower token_budget" if spec.corpus == "source" else f"raise datasets.{name}.n_samples"
        )
        line += f", fewer than its token budget: {fix}"
    source = dataset.get("source_size")
    if source is not None:
        share = sequences * spec.context / source["tokens"]
        line += f"; the source holds ≈ {source['tokens']:,} tokens (the corpus is {share:.2%})"
    return line
