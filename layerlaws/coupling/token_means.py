"""A prompt's token-wise coupling as one statistic per (layer pair, kind, K, metric): the
mean m̃ over its pairs of distinct tokens (t ≠ t′) and how many pairs. A job writes the
token-wise rows of the prompts it keeps only (``coupling.keep_arrays``,
``layerlaws.coupling.kept``), these statistics of every prompt with Jacobians, so that a
mean over every prompt's pairs (Aubry et al. §4.3: coupling between tokens, trained
against random) is the mean of these weighted by ``pairs``. Torch-free."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

KEY = ("layer_a", "layer_b", "kind", "k", "metric")
"""The columns one statistic is of."""


def token_means(rows: Iterable[Mapping[str, Any]]) -> list[dict[str, Any]]:
    """Per ``KEY`` of a prompt's token-wise ``rows`` (``PromptMeasurement.tokens``):
    ``pairs``, its rows with ``token_a`` ≠ ``token_b``, and ``miscoupling``, their mean
    (a float64 sum), in the order the keys first appear; a key with no such pair has none."""
    sums: dict[tuple[Any, ...], tuple[float, int]] = {}
    for row in rows:
        if row["token_a"] != row["token_b"]:
            key = tuple(row[column] for column in KEY)
            total, pairs = sums.get(key, (0.0, 0))
            sums[key] = (total + float(row["miscoupling"]), pairs + 1)
    return [
        dict(zip(KEY, key, strict=True)) | {"pairs": pairs, "miscoupling": total / pairs}
        for key, (total, pairs) in sums.items()
    ]
