"""The outcome of the synthetic addition stage per task and model: final R_order over the
seeds (mean ± sd), accuracies, and how closely the final anchor embeddings follow each
probability signature."""

from __future__ import annotations

from collections.abc import Mapping

import numpy as np
import polars as pl

from layerlaws.core.geometry import cosine_matrix, off_diagonal, r_cos
from layerlaws.synthetic.tasks import ANCHOR_SIGNATURES


def alignment(embedding: np.ndarray, signature: np.ndarray) -> float:
    """R_cos of the synthetic tasks: ``layerlaws.core.geometry.r_cos`` of the cosines of the
    anchor embeddings (|A|, d) and of a signature (|A|, ·); NaN when either is constant
    across anchor pairs (a signature identical across anchors)."""
    first, second = cosine_matrix(embedding), cosine_matrix(signature)
    if np.ptp(off_diagonal(first)) == 0 or np.ptp(off_diagonal(second)) == 0:
        return float("nan")
    return r_cos(first, second)


def summarize(
    records: Mapping[tuple[str, str], pl.DataFrame],
    weights: Mapping[tuple[str, str], Mapping[str, np.ndarray]],
    signatures: Mapping[str, Mapping[str, np.ndarray]],
) -> pl.DataFrame:
    """One row per task and model at the last epoch: ``task``, ``model``, ``epoch``,
    ``seeds``, ``r_order_mean``, ``r_order_sd`` (ddof 1), ``train_accuracy``,
    ``test_accuracy`` (means over seeds) and ``alignment_<signature>`` (mean over seeds)."""
    rows = []
    for (task, model), table in records.items():
        last = table.filter(pl.col("epoch") == table["epoch"].max())
        final = weights[task, model]["anchor_embeddings"][-1]
        rows.append(
            {
                "task": task,
                "model": model,
                "epoch": int(last["epoch"][0]),
                "seeds": last.height,
                "r_order_mean": float(last["r_order"].mean()),
                "r_order_sd": float(last["r_order"].std(ddof=1) or 0.0),
                "train_accuracy": float(last["train_accuracy"].mean()),
                "test_accuracy": float(last["test_accuracy"].mean()),
                **{
                    f"alignment_{name}": float(
                        np.nanmean([alignment(seed, signatures[task][name]) for seed in final])
                    )
                    for name in ANCHOR_SIGNATURES
                },
            }
        )
    return pl.DataFrame(rows)


def read_results(
    records: Mapping[tuple[str, str], str],
    weights: Mapping[tuple[str, str], str],
    signatures: Mapping[str, str],
) -> tuple[
    dict[tuple[str, str], pl.DataFrame],
    dict[tuple[str, str], dict[str, np.ndarray]],
    dict[str, dict[str, np.ndarray]],
]:
    """The stage's tables and arrays from their paths: ``r_order.csv`` and ``weights.npz``
    by (task, model), ``signatures.npz`` by task."""

    def arrays(path: str) -> dict[str, np.ndarray]:
        with np.load(path) as archive:
            return dict(archive)

    return (
        {key: pl.read_csv(path) for key, path in records.items()},
        {key: arrays(path) for key, path in weights.items()},
        {task: arrays(path) for task, path in signatures.items()},
    )
