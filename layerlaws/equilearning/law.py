"""The law of equi-learning: log PR linear in the layer index (He & Su, §1).

Fit log PR_l = a + b·l over l = 1..L by least squares; decay ratio ρ = exp(b), Pearson r
between l and log PR_l, overall decay PR_L / PR_1.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import polars as pl

NEXT_TOKEN = 1
"""The offset of the next token, the target of the law."""
LAW_KEYS = ("offset", "norm", "control")
LAW_STATISTICS = ("rho", "pearson", "pr_first", "pr_last", "overall_decay", "intercept", "slope")
"""The columns of a law fit, after its keys; log PR = intercept + slope · layer."""


@dataclass(frozen=True)
class LawFit:
    """Least-squares fit of log PR against layer."""

    intercept: float
    slope: float
    rho: float
    pearson: float
    pr_first: float
    pr_last: float
    overall_decay: float


def fit_law(layers: np.ndarray, pr: np.ndarray) -> LawFit:
    """Fit log PR = a + b·layer. ``layers`` and ``pr`` have shape (n_layers,), PR > 0."""
    layers = np.asarray(layers, dtype=np.float64)
    pr = np.asarray(pr, dtype=np.float64)
    order = np.argsort(layers)
    layers, pr = layers[order], pr[order]
    if len(layers) < 2 or np.any(~np.isfinite(pr)) or np.any(pr <= 0):
        nan = float("nan")
        return LawFit(nan, nan, nan, nan, float(pr[0]), float(pr[-1]), nan)
    log_pr = np.log(pr)
    slope, intercept = np.polyfit(layers, log_pr, 1)
    pearson = float(np.corrcoef(layers, log_pr)[0, 1])
    return LawFit(
        intercept=float(intercept),
        slope=float(slope),
        rho=float(np.exp(slope)),
        pearson=pearson,
        pr_first=float(pr[0]),
        pr_last=float(pr[-1]),
        overall_decay=float(pr[-1] / pr[0]),
    )


def law_table(pr_table: pl.DataFrame) -> pl.DataFrame:
    """One law fit per (offset, norm, control) of a ``pr.csv`` table, over layers ≥ 1.

    Columns: offset, norm, control, rho, pearson, pr_first, pr_last, overall_decay,
    intercept, slope (the fitted line log PR = intercept + slope · layer, which the figures
    draw).
    """
    rows = []
    blocks = pr_table.filter(pl.col("layer") >= 1).partition_by(LAW_KEYS, as_dict=True)
    for key, block in sorted(blocks.items()):
        fit = fit_law(block["layer"].to_numpy(), block["pr"].to_numpy())
        rows.append(
            dict(zip(LAW_KEYS, key, strict=True))
            | {name: getattr(fit, name) for name in LAW_STATISTICS}
        )
    return pl.DataFrame(rows)


def fuzziness_law_table(fuzziness: pl.DataFrame) -> pl.DataFrame:
    """The same fit to the separation fuzziness of each norm (``fuzziness.csv``), over
    layers ≥ 1: ``norm``, ``rho``, ``pearson``, ``fuzziness_first``, ``fuzziness_last``,
    ``overall_decay``, ``intercept``, ``slope``."""
    rows = []
    for (norm,), block in sorted(
        fuzziness.filter(pl.col("layer") >= 1).partition_by("norm", as_dict=True).items()
    ):
        fit = fit_law(block["layer"].to_numpy(), block["fuzziness"].to_numpy())
        rows.append(
            {
                "norm": norm,
                "rho": fit.rho,
                "pearson": fit.pearson,
                "fuzziness_first": fit.pr_first,
                "fuzziness_last": fit.pr_last,
                "overall_decay": fit.overall_decay,
                "intercept": fit.intercept,
                "slope": fit.slope,
            }
        )
    return pl.DataFrame(rows)


def best_datasets(summary: pl.DataFrame, norm: str = "model") -> pl.DataFrame:
    """Per model, its probing datasets ranked by the strength of the next-token law (the
    most negative Pearson r first; norm ``norm`` if measured, no control), as He & Su
    report each model on its best set: ``model``, ``rank`` (1 = best), ``dataset``,
    ``pearson``, ``rho``, ``chosen`` (rank 1)."""
    norms = summary["norm"].unique().to_list()
    used = norm if norm in norms else sorted(norms)[0]
    next_token = summary.filter(
        (pl.col("offset") == NEXT_TOKEN) & (pl.col("norm") == used) & (pl.col("control") == "none")
    )
    ranked = next_token.sort(["model", "pearson"]).with_columns(
        pl.col("pearson").rank("ordinal").over("model").cast(pl.Int64).alias("rank")
    )
    return ranked.select(
        "model", "rank", "dataset", "pearson", "rho", (pl.col("rank") == 1).alias("chosen")
    ).sort(["model", "rank"])
