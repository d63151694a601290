"""Probing corpus: a reproducible (seeded) sample of texts from a configured source.

The sample is the table ``sentences.parquet`` with columns ``sentence_id`` (int64, 0..n-1
in sampled order), ``text`` (str) and ``source`` (str, where the text came from).
"""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence, Set
from pathlib import Path
from typing import Any

import numpy as np
import polars as pl

from layerlaws.core.errors import LayerlawsError
from layerlaws.text.sources import LOCAL_LOADERS, Candidate, hub_sample

log = logging.getLogger(__name__)

SENTENCE_SCHEMA = {"sentence_id": pl.Int64, "text": pl.String, "source": pl.String}


def _draw(
    candidates: list[Candidate], count: int | None, sample_seed: int, exclude: Set[str]
) -> list[Candidate]:
    nonblank = [
        (text.strip(), where) for text, where in candidates if text.strip() and where not in exclude
    ]
    order = np.random.default_rng(sample_seed).permutation(len(nonblank))
    return [nonblank[i] for i in order[:count]]


def prompt_datasets(prompt_set: Mapping[str, Any]) -> list[str]:
    """The datasets a coupling prompt set draws texts from (its ``dataset``: none, one key,
    or a list of keys)."""
    dataset = prompt_set.get("dataset")
    if dataset is None:
        return []
    return [dataset] if isinstance(dataset, str) else list(dataset)


def prompt_sources(
    prompt_set: Mapping[str, Any], samples: Sequence[pl.DataFrame]
) -> list[tuple[str, str | None]]:
    """The texts of a coupling prompt set, each with the dataset it comes from: its own
    ``texts`` (dataset None), then the first ``n_from_dataset`` texts of each of its
    datasets' samples (``sentences.parquet`` tables, in the order of ``prompt_datasets``)."""
    sources: list[tuple[str, str | None]] = [(text, None) for text in prompt_set["texts"]]
    for dataset, sample in zip(prompt_datasets(prompt_set), samples, strict=True):
        texts = sample["text"].head(prompt_set["n_from_dataset"]).to_list()
        sources += [(text, dataset) for text in texts]
    return sources


def prompt_count(prompt_set: Mapping[str, Any]) -> int:
    """The most texts ``prompt_sources`` gives a coupling prompt set: its own ``texts`` and
    ``n_from_dataset`` of each of its datasets (fewer when a sample is shorter)."""
    return len(prompt_set["texts"]) + prompt_set["n_from_dataset"] * len(
        prompt_datasets(prompt_set)
    )


def excluded_sources(samples: Sequence[str | Path]) -> set[str]:
    """The ``source`` of every text of the samples (sentences.parquet) ``samples``."""
    return {where for path in samples for where in pl.read_parquet(path)["source"].to_list()}


def sample_sentences(
    source: Mapping[str, Any],
    n_samples: int | str,
    sample_seed: int,
    exclude: Set[str] = frozenset(),
) -> pl.DataFrame:
    """Draw ``n_samples`` non-blank texts (``all``: every one, in a seeded order) from
    ``source`` with a generator seeded by ``sample_seed``, leaving out those whose source
    is in ``exclude``.

    Raises LayerlawsError when the source holds no text at all; when it holds fewer than
    ``n_samples`` texts, all of them are used and a warning is logged.
    """
    kind = source["kind"]
    count = None if n_samples == "all" else int(n_samples)
    if kind == "hub":
        chosen = [
            (text.strip(), where) for text, where in hub_sample(source, count, sample_seed, exclude)
        ]
    elif kind in LOCAL_LOADERS:
        chosen = _draw(LOCAL_LOADERS[kind](source), count, sample_seed, exclude)
    else:
        raise LayerlawsError(
            f"unknown dataset source kind {kind!r}; use one of {['hub', *LOCAL_LOADERS]}"
        )
    if not chosen:
        raise LayerlawsError(
            f"the probing corpus {dict(source)} is empty: it holds no non-blank text. "
            f"Point the dataset at files or a dataset that contain text."
        )
    if count is not None and len(chosen) < count:
        log.warning(
            "corpus holds only %d texts; using all of them (asked for %d)", len(chosen), n_samples
        )
    return pl.DataFrame(
        {
            "sentence_id": np.arange(len(chosen), dtype=np.int64),
            "text": [text for text, _ in chosen],
            "source": [where for _, where in chosen],
        },
        schema=SENTENCE_SCHEMA,
    )
