"""Probing corpus: a reproducible (seeded) sample of texts from a configured source.

The sample is the table ``sentences.parquet`` with columns ``sentence_id`` (int64, 0..n-1
in sampled order), ``text`` (str) and ``source`` (str, where the text came from).
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from typing import Any

import numpy as np
import polars as pl

from layerlaws.errors import LayerlawsError
from layerlaws.sources import LOCAL_LOADERS, Candidate, hub_sample

log = logging.getLogger(__name__)

SENTENCE_SCHEMA = {"sentence_id": pl.Int64, "text": pl.String, "source": pl.String}


def _draw(candidates: list[Candidate], count: int, sample_seed: int) -> list[Candidate]:
    nonblank = [(text.strip(), where) for text, where in candidates if text.strip()]
    order = np.random.default_rng(sample_seed).permutation(len(nonblank))
    return [nonblank[i] for i in order[:count]]


def sample_sentences(source: Mapping[str, Any], n_samples: int, sample_seed: int) -> pl.DataFrame:
    """Draw ``n_samples`` non-blank texts from ``source`` with a generator seeded by
    ``sample_seed``.

    Raises LayerlawsError when the source holds no text at all; when it holds fewer than
    ``n_samples`` texts, all of them are used and a warning is logged.
    """
    kind = source["kind"]
    if kind == "hub":
        chosen = [
            (text.strip(), where) for text, where in hub_sample(source, n_samples, sample_seed)
        ]
    elif kind in LOCAL_LOADERS:
        chosen = _draw(LOCAL_LOADERS[kind](source), n_samples, sample_seed)
    else:
        raise LayerlawsError(
            f"unknown dataset source kind {kind!r}; use one of {['hub', *LOCAL_LOADERS]}"
        )
    if not chosen:
        raise LayerlawsError(
            f"the probing corpus {dict(source)} is empty: it holds no non-blank text. "
            f"Point the dataset at files or a dataset that contain text."
        )
    if len(chosen) < n_samples:
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
