"""Figures of a series and of a training run: each quantity against x (emergence with
training, scaling with size), generalisation against coupling with its fitted line (Aubry
et al., Fig. 1a)."""

from __future__ import annotations

import math
import os
from collections.abc import Mapping
from typing import Any

import numpy as np
import polars as pl

from layerlaws.core.figures import plt, save_figure
from layerlaws.series.summary import PAPER_METRIC, coupling_column_parts

QUANTITY_LABELS = {
    "rho": "decay ratio ρ",
    "pearson": "Pearson r (law)",
    "pr_first": "PR at layer 1",
    "pr_last": "PR at layer L",
    "overall_decay": "PR_L / PR_1",
    "loss": "held-out loss (nats)",
    "accuracy": "top-1 accuracy",
    "lss_median": "median line-shape score",
    "expodistance_median": "median expodistance",
    "equidistance_cv_median": "median CV of step lengths",
    "rcos_we_next": "R_cos(W_E, φ_next)",
    "rcos_wu_pre": "R_cos(W_U, φ_pre)",
}
PER_DATASET = ("rho", "pearson", "pr_first", "pr_last", "overall_decay", "loss", "accuracy")
"""Quantities measured on each probing dataset (one line per dataset)."""
X_LABELS = {
    "step": "training step",
    "tokens": "tokens seen",
    "parameters": "parameters",
    "label": "",
}


def _label(column: str) -> str:
    if column.startswith("miscoupling_"):
        kind, k, metric = coupling_column_parts(column)
        name = {"all": "mean mis-coupling m", "offdiagonal": "off-diagonal m̃"}[kind]
        return f"{name}, K={k}" + ("" if metric == PAPER_METRIC else f" ({metric})")
    return QUANTITY_LABELS.get(column, column)


def quantities_of(summary: pl.DataFrame) -> list[str]:
    """The summary's measured columns, in the order they are drawn (of the coupling
    metrics other than the paper's, the mean over all layer pairs only)."""
    ordered = [c for c in QUANTITY_LABELS if c in summary.columns]
    coupling = [
        c
        for c in summary.columns
        if c.startswith("miscoupling_")
        and (c.startswith("miscoupling_all_") or coupling_column_parts(c)[2] == PAPER_METRIC)
    ]
    scores = [c for c in summary.columns if c.startswith("score_")]
    return ordered + coupling + scores


def _x_axis(axis: Any, kind: str, xs: list[Any]) -> None:
    """A symmetric-log x axis for steps, tokens and parameters spanning more than a decade
    and a half (step 0 included); the models' labels as categories for labels."""
    if kind == "label":
        axis.set_xticks(range(len(xs)), [str(x) for x in xs], rotation=45, ha="right")
        return
    positive = [x for x in xs if x > 0]
    if positive and max(positive) / min(positive) > 20:
        axis.set_xscale("symlog", linthresh=min(positive))
    axis.set_xlabel(X_LABELS[kind])


def _panels(count: int, n_columns: int, height: float, options: Mapping[str, Any]) -> Any:
    """A figure of at least one panel, ``count`` panels in rows of ``n_columns``, each row
    ``height`` inches high: (figure, axes as a 2-d array)."""
    n_rows = max(1, math.ceil(count / n_columns))
    return plt.subplots(
        n_rows,
        n_columns,
        figsize=(options["width"], height * n_rows),
        squeeze=False,
        constrained_layout=True,
    )


def plot_quantities(
    summary: pl.DataFrame,
    x_kind: str,
    *,
    path: str | os.PathLike[str],
    title: str,
    options: Mapping[str, Any],
) -> None:
    """One panel per quantity against x, one line per probing dataset."""
    columns = quantities_of(summary)
    figure, axes = _panels(len(columns), 3, 2.4, options)
    members = summary.unique("model", keep="first", maintain_order=True)
    models, xs = members["model"].to_list(), members["x"].to_list()
    datasets = summary["dataset"].unique(maintain_order=True).to_list()
    for axis, column in zip(axes.flat, columns, strict=False):
        per_dataset = column in PER_DATASET
        for dataset in datasets if per_dataset else [None]:
            rows = summary if dataset is None else summary.filter(pl.col("dataset") == dataset)
            rows = rows.unique("model", keep="first", maintain_order=True)
            positions = (
                [models.index(model) for model in rows["model"]]
                if x_kind == "label"
                else rows["x"].to_list()
            )
            axis.plot(positions, rows[column].to_list(), "o-", markersize=3, label=dataset)
        _x_axis(axis, x_kind, xs)
        axis.set_title(_label(column), fontsize=9)
        if per_dataset and len(datasets) > 1:
            axis.legend(fontsize=6)
    for axis in list(axes.flat)[len(columns) :]:
        axis.set_visible(False)
    figure.suptitle(title, fontsize=10)
    save_figure(figure, path, options)


def plot_generalisation(
    summary: pl.DataFrame,
    fits: pl.DataFrame,
    *,
    path: str | os.PathLike[str],
    title: str,
    options: Mapping[str, Any],
) -> None:
    """Generalisation (held-out loss, external scores) against coupling (−m by the paper's
    metric; ``fits.csv`` has the other metrics' fits too), with the least-squares line, R²
    and p-value of each fit; a note when nothing can be fitted."""
    if "metric" in fits.columns:
        fits = fits.filter(pl.col("metric") == PAPER_METRIC)
    figure, axes = _panels(len(fits), min(3, max(1, len(fits))), 2.8, options)
    if fits.is_empty():
        axes[0, 0].text(
            0.5,
            0.5,
            "nothing to fit: coupling and a generalisation measure\n"
            "are needed for at least three models",
            ha="center",
            va="center",
        )
        axes[0, 0].set_axis_off()
    for axis, fit in zip(axes.flat, fits.iter_rows(named=True), strict=False):
        column = fit["coupling"].replace("coupling", "miscoupling_all")
        rows = (
            summary
            if fit["dataset"] is None
            else summary.filter(pl.col("dataset") == fit["dataset"])
        )
        rows = rows.unique("model", keep="first", maintain_order=True)
        xs = -rows[column].to_numpy()
        ys = rows[fit["generalisation"]].to_numpy()
        axis.plot(xs, ys, "o", markersize=4)
        line = np.linspace(xs.min(), xs.max(), 2)
        axis.plot(
            line,
            fit["intercept"] + fit["slope"] * line,
            "-",
            label=f"R² = {fit['r2']:.2f}, p = {fit['p_value']:.2g}",
        )
        axis.set_xlabel(f"coupling −m (K={fit['k']})")
        measure = fit["generalisation"]
        axis.set_ylabel(measure + ("" if fit["dataset"] is None else f" ({fit['dataset']})"))
        axis.legend(fontsize=7)
    for axis in list(axes.flat)[len(fits) :]:
        axis.set_visible(len(fits) == 0 and axis is axes[0, 0])
    figure.suptitle(title, fontsize=10)
    save_figure(figure, path, options)
