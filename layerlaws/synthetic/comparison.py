"""The synthetic stage's results against what Yao & Xu say of them (§5.1, §5.2, Appendix
B.2). The paper gives its addition-task results as curves and heatmaps only (Figs. 1B, 2,
8), with no number in its text, so each of its statements is quoted with where it is made,
next to the quantity of ours it is about and a stated criterion for reading it:

- learned well, effective fit: final training accuracy ≥ ``LEARNED`` (0.9);
- fails to learn: final training accuracy < ``FAILED`` (0.5);
- ordered, "a strong negative R_order (approximately −1)": mean R_order ≤ ``ORDERED``
  (−0.8);
- chaotic: |mean R_order| < ``CHAOTIC`` (0.5);
- aligned in nearly the same direction: the smallest cosine between two anchors'
  embeddings ≥ ``ALIGNED`` (0.9);
- ordered with more steps than another task: the first recorded epoch at which the mean
  R_order reaches ``ORDERED`` comes later (or never, where the other's does); recorded
  epochs only (``synthetic.records``), so two tasks that order between the same two
  records tie.

Every quantity is over the seeds (mean, and sd where it has one) of the stage's records
(``r_order.csv``) and weights (``weights.npz``) of each task and model.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass

import numpy as np
import polars as pl

from layerlaws.core.geometry import cosine_matrix, off_diagonal

LEARNED, FAILED, ORDERED, CHAOTIC, ALIGNED = 0.9, 0.5, -0.8, 0.5, 0.9
COMPARISON_SCHEMA = {
    "where": pl.String,
    "paper_says": pl.String,
    "task": pl.String,
    "model": pl.String,
    "quantity": pl.String,
    "epochs": pl.Int64,
    "ours": pl.Float64,
    "ours_sd": pl.Float64,
    "criterion": pl.String,
    "holds": pl.Boolean,
}
"""The columns of ``paper_comparison.csv``."""


@dataclass(frozen=True)
class PaperClaim:
    """One statement of Yao & Xu about a task and model, read as ``criterion`` on
    ``quantity`` (a key of ``QUANTITIES``), or on ``ordering_epoch`` against the task
    ``later_than`` (same model)."""

    where: str
    says: str
    task: str
    model: str
    quantity: str
    criterion: str
    later_than: str | None = None


QUANTITIES = {
    "final_train_accuracy": "training accuracy at the last epoch",
    "final_r_order": "R_order(W_E of the anchors) at the last epoch",
    "snapshot_r_order": "R_order at the snapshot epoch (the paper's PCA figures: 120)",
    "ordering_epoch": f"first recorded epoch with mean R_order ≤ {ORDERED}",
    "smallest_anchor_cosine": "smallest cosine between two anchors' final embeddings",
}
"""What each claim is read on (the table's ``quantity`` column names it in words)."""

LEARNED_WELL = f"≥ {LEARNED}"
ORDERED_READING = f"≤ {ORDERED}"
WELL = "both f_add and f̃_add are learned well by the linear model"
NEEDS_FFN = "f_mod requires the nonlinear model to achieve an effective fit"
STRONG = "a strong negative R_order (approximately −1)"
PAPER_CLAIMS = (
    PaperClaim("§5.1, Fig. 1B", WELL, "add", "linear", "final_train_accuracy", LEARNED_WELL),
    PaperClaim(
        "§5.1, Fig. 1B", WELL, "add_same_range", "linear", "final_train_accuracy", LEARNED_WELL
    ),
    PaperClaim("§5.1, Fig. 1B", NEEDS_FFN, "mod", "linear", "final_train_accuracy", f"< {FAILED}"),
    PaperClaim("§5.1, Fig. 1B", NEEDS_FFN, "mod", "ffn", "final_train_accuracy", LEARNED_WELL),
    *(
        PaperClaim("§5.2, Fig. 2B", says, task, model, "final_r_order", ORDERED_READING)
        for task, says in (
            ("add", f"f_add: anchor embeddings quickly form an ordered structure; {STRONG}"),
            (
                "add_same_range",
                "f̃_add: the anchor embeddings also develop a similar hierarchical structure",
            ),
        )
        for model in ("linear", "ffn")
    ),
    *(
        PaperClaim(
            "§5.2, Fig. 2B",
            "f̃_add: its construction requires more steps (than f_add's)",
            "add_same_range",
            model,
            "ordering_epoch",
            "later than f_add's",
            later_than="add",
        )
        for model in ("linear", "ffn")
    ),
    PaperClaim(
        "§5.2, Fig. 2A",
        "f_mod, F_lin: all embedding vectors become aligned in nearly the same direction",
        "mod",
        "linear",
        "smallest_anchor_cosine",
        f"≥ {ALIGNED}",
    ),
    PaperClaim(
        "§5.2, Fig. 2B",
        "f_mod: the anchor embeddings in F_ffn construct an ordered structure",
        "mod",
        "ffn",
        "final_r_order",
        ORDERED_READING,
    ),
    PaperClaim(
        "§5.2, Fig. 2B",
        "f_mod in F_ffn: an ordered structure with more steps (than f_add's)",
        "mod",
        "ffn",
        "ordering_epoch",
        "later than f_add's",
        later_than="add",
    ),
    *(
        PaperClaim(
            "App. B.2, Fig. 8",
            "f_add and f̃_add both establish an ordered structure (F_lin, epoch 120)",
            task,
            "linear",
            "snapshot_r_order",
            ORDERED_READING,
        )
        for task in ("add", "add_same_range")
    ),
    PaperClaim(
        "App. B.2, Fig. 8",
        "the anchor embeddings in f_mod are chaotic (F_lin, epoch 120)",
        "mod",
        "linear",
        "snapshot_r_order",
        f"|·| < {CHAOTIC}",
    ),
)
"""Yao & Xu's statements on the addition tasks' training, quoted, in the paper's order."""


def _mean_sd(values: np.ndarray) -> tuple[float, float]:
    """Mean and sd (ddof 1; NaN for one value) over seeds."""
    return float(np.mean(values)), float(np.std(values, ddof=1)) if len(values) > 1 else math.nan


def quantities(
    record: pl.DataFrame, weights: Mapping[str, np.ndarray]
) -> dict[str, tuple[float, float]]:
    """(mean, sd over seeds) of each of ``QUANTITIES`` for one task and model, from its
    ``r_order.csv`` table and ``weights.npz`` arrays (``ordering_epoch`` has no sd, and is
    NaN when the mean R_order never reaches ``ORDERED``)."""

    def at(epoch: int, column: str) -> tuple[float, float]:
        return _mean_sd(record.filter(pl.col("epoch") == epoch)[column].to_numpy())

    means = record.group_by("epoch").agg(pl.col("r_order").mean()).sort("epoch")
    reached = means.filter(pl.col("r_order") <= ORDERED)["epoch"]
    final = weights["anchor_embeddings"][-1]
    return {
        "final_train_accuracy": at(int(record["epoch"].max()), "train_accuracy"),
        "final_r_order": at(int(record["epoch"].max()), "r_order"),
        "snapshot_r_order": at(int(weights["snapshot_epoch"]), "r_order"),
        "ordering_epoch": (float(reached[0]) if len(reached) else math.nan, math.nan),
        "smallest_anchor_cosine": _mean_sd(
            np.array([off_diagonal(cosine_matrix(seed)).min() for seed in final])
        ),
    }


def _holds(claim: PaperClaim, value: float, other: float | None) -> bool:
    """Whether ``value`` meets the claim's criterion; ``other``: the ordering epoch of the
    ``later_than`` task (a task that never orders comes later than one that does)."""
    if claim.later_than is not None:
        return not math.isnan(other) and (math.isnan(value) or value > other)
    if claim.quantity == "final_train_accuracy":
        return value >= LEARNED if claim.criterion == LEARNED_WELL else value < FAILED
    if claim.quantity == "smallest_anchor_cosine":
        return value >= ALIGNED
    return value <= ORDERED if claim.criterion == ORDERED_READING else abs(value) < CHAOTIC


def paper_comparison(
    records: Mapping[tuple[str, str], pl.DataFrame],
    weights: Mapping[tuple[str, str], Mapping[str, np.ndarray]],
) -> pl.DataFrame:
    """One row per claim of ``PAPER_CLAIMS`` whose task and model (and ``later_than``
    task) were trained, the columns of ``COMPARISON_SCHEMA``: ``quantity`` in words,
    ``epochs`` the last trained, ``ours`` the mean over seeds."""
    found = {pair: quantities(records[pair], weights[pair]) for pair in records}
    rows = []
    for claim in PAPER_CLAIMS:
        pair = claim.task, claim.model
        compared = None if claim.later_than is None else (claim.later_than, claim.model)
        if pair not in found or (compared is not None and compared not in found):
            continue
        value, sd = found[pair][claim.quantity]
        other = None if compared is None else found[compared][claim.quantity][0]
        rows.append(
            {
                "where": claim.where,
                "paper_says": claim.says,
                "task": claim.task,
                "model": claim.model,
                "quantity": QUANTITIES[claim.quantity],
                "epochs": int(records[pair]["epoch"].max()),
                "ours": value,
                "ours_sd": sd,
                "criterion": claim.criterion
                if compared is None
                else f"{claim.criterion} ({'never' if math.isnan(other) else f'{other:g}'})",
                "holds": _holds(claim, value, other),
            }
        )
    return pl.DataFrame(rows, schema=COMPARISON_SCHEMA)
