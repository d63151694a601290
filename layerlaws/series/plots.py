"""Figures of a series and of a training run: each quantity against x (emergence with
training, scaling with size), generalisation against coupling with its fitted line (Aubry
et al., Fig. 1a), the scores' exponential fit against coupling (Fig. 8) and linear fits
against size, depth and width (§5.4), and the members side by side (He & Su, Figs. 1 and
7; Yao & Xu, Fig. 5B)."""

from __future__ import annotations

import math
import os
from collections.abc import Mapping
from typing import Any

import numpy as np
import polars as pl

from layerlaws.core.figures import finish_figure, plt
from layerlaws.series.settings import ALL_MEMBERS
from layerlaws.series.summary import (
    GENERALISATION_METRIC,
    HYPERPARAMETERS,
    PAPER_METRIC,
    TWIN_SUFFIXES,
    coupling_column,
    coupling_column_parts,
    fit_points,
)

QUANTITY_LABELS = {
    "rho": "decay ratio ρ",
    "pearson": "Pearson r (law)",
    "pr_first": "PR at layer 1",
    "pr_last": "PR at layer L",
    "overall_decay": "PR_L / PR_1",
    "loss": "held-out loss (nats)",
    "accuracy": "top-1 accuracy",
    "bits_per_byte": "bits per byte",
    "bits_per_character": "bits per character",
    "effective_rank_last": "effective rank at layer L",
    "alpha_req_last": "α-ReQ α at layer L",
    "dataset_entropy_last": "dataset entropy at layer L",
    "anisotropy_last": "anisotropy at layer L",
    "cka_previous_mean": "mean CKA with the previous layer",
    "lss_mean": "mean line-shape score",
    "lss_median": "median line-shape score",
    "expodistance_mean": "mean expodistance",
    "expodistance_median": "median expodistance",
    "equidistance_cv_mean": "mean CV of step lengths",
    "equidistance_cv_median": "median CV of step lengths",
    "rcos_we_next": "R_cos(W_E, φ_next)",
    "rcos_wu_pre": "R_cos(W_U, φ_pre)",
}
PER_DATASET = (
    "rho",
    "pearson",
    "pr_first",
    "pr_last",
    "overall_decay",
    "loss",
    "accuracy",
    "bits_per_byte",
    "bits_per_character",
    "effective_rank_last",
    "alpha_req_last",
    "dataset_entropy_last",
    "anisotropy_last",
    "cka_previous_mean",
)
"""Quantities measured on each probing dataset (one line per dataset)."""
X_LABELS = {
    "step": "training step",
    "tokens": "tokens seen",
    "parameters": "parameters",
    "label": "",
}
PREDICTOR_LABELS = {
    "log10_parameters": "log10 parameters",
    "num_layers": "depth (layers)",
    "hidden_size": "width (hidden size)",
}
"""Axis labels of the hyper-parameter predictors of ``fits.csv``."""
RANDOM_SUFFIX = TWIN_SUFFIXES["random"]


METRIC_SYMBOLS = {PAPER_METRIC: "m̃", "unnormalised": "m"}
"""The symbol of a coupling metric in labels: Aubry et al.'s m̃ (Eq. 14) and m (Eq. 13); the
released code's metrics are named after the symbol."""


def _metric_symbol(metric: str) -> str:
    return METRIC_SYMBOLS.get(metric, f"m̃ ({metric})")


def _label(column: str) -> str:
    if column.startswith("miscoupling_"):
        kind, k, metric = coupling_column_parts(column)
        pairs = {"all": "all pairs", "offdiagonal": "off-diagonal"}[kind]
        return f"mean {_metric_symbol(metric)}, {pairs}, K={k}"
    return QUANTITY_LABELS.get(column, column)


DRAWN_METRICS = (PAPER_METRIC, "unnormalised")
"""The coupling metrics drawn against x: Aubry et al.'s m̃ (Eq. 14) and m (Eq. 13)."""


def quantities_of(summary: pl.DataFrame) -> list[str]:
    """The summary's columns drawn against x, in order: the law, the held-out evaluation,
    the representation geometry (where measured), the trajectories' means, R_cos, the
    coupling by ``DRAWN_METRICS`` over all layer pairs at each K, the scores (the summary
    also holds the medians, the off-diagonal means and the released code's metrics)."""
    ordered = [c for c in QUANTITY_LABELS if c in summary.columns and not c.endswith("_median")]
    coupling = [
        c
        for c in summary.columns
        if c.startswith("miscoupling_all_") and coupling_column_parts(c)[2] in DRAWN_METRICS
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


def _dataset_rows(summary: pl.DataFrame, dataset: str | None) -> pl.DataFrame:
    """One row per model: of ``dataset``, or the first of each model for None."""
    rows = summary if dataset is None else summary.filter(pl.col("dataset") == dataset)
    return rows.unique("model", keep="first", maintain_order=True)


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
    figure, axes = _panels(len(columns), 4, 2.4, options)
    members = summary.unique("model", keep="first", maintain_order=True)
    models, xs = members["model"].to_list(), members["x"].to_list()
    datasets = summary["dataset"].unique(maintain_order=True).to_list()
    for axis, column in zip(axes.flat, columns, strict=False):
        per_dataset = column in PER_DATASET
        for dataset in datasets if per_dataset else [None]:
            rows = _dataset_rows(summary, dataset)
            positions = (
                [models.index(model) for model in rows["model"]]
                if x_kind == "label"
                else rows["x"].to_list()
            )
            axis.plot(positions, rows[column].to_list(), "o-", markersize=3, label=dataset)
        if column + RANDOM_SUFFIX in summary.columns:
            twin = summary.unique("model", keep="first", maintain_order=True)
            positions = range(len(models)) if x_kind == "label" else xs
            axis.plot(positions, twin[column + RANDOM_SUFFIX].to_list(), "--", color="grey")
            axis.plot([], [], "--", color="grey", label="random twin")
        _x_axis(axis, x_kind, xs)
        axis.set_title(_label(column), fontsize=9)
        if (per_dataset and len(datasets) > 1) or column + RANDOM_SUFFIX in summary.columns:
            axis.legend(fontsize=6)
    for axis in list(axes.flat)[len(columns) :]:
        axis.set_visible(False)
    finish_figure(figure, title, path, options, tight=False)


def _predictor_label(fit: Mapping[str, Any]) -> str:
    if fit["k"] is None:
        return PREDICTOR_LABELS[fit["predictor"]]
    return f"coupling −{_metric_symbol(fit['metric'])} (K={fit['k']})"


def _draw_fit(axis: Any, summary: pl.DataFrame, fit: Mapping[str, Any]) -> None:
    """One fit of ``fits.csv``: its models (hollow: left out of the fits), its line or
    exponential curve, R² (and p for a line)."""
    args = (summary, fit["predictor"], fit["generalisation"], fit["dataset"])
    points, left_out = fit_points(*args), fit_points(*args, in_fits=False)
    axis.plot(points["x"], points["y"], "o", markersize=4, color="C0")
    if not left_out.is_empty():
        axis.plot(
            left_out["x"],
            left_out["y"],
            "o",
            markersize=4,
            mfc="none",
            color="C0",
            label="left out",
        )
    line = np.linspace(points["x"].min(), points["x"].max(), 50)
    if fit["form"] == "linear":
        curve = fit["intercept"] + fit["slope"] * line
        label = f"R² = {fit['r2']:.2f}, p = {fit['p_value']:.2g}"
    else:
        curve = fit["amplitude"] * np.exp(fit["rate"] * line)
        label = f"{fit['amplitude']:.3g}·exp({fit['rate']:.3g} x), R² = {fit['r2']:.2f}"
    axis.plot(line, curve, "-", color="C1", label=label)
    axis.set_xlabel(_predictor_label(fit))
    measure = _label(fit["generalisation"])
    axis.set_ylabel(measure + ("" if fit["dataset"] is None else f" ({fit['dataset']})"))
    axis.legend(fontsize=7)


def _plot_fits(
    summary: pl.DataFrame,
    fits: pl.DataFrame,
    *,
    path: str | os.PathLike[str],
    title: str,
    options: Mapping[str, Any],
) -> None:
    """A panel per fit (``_draw_fit``); a note when there is none."""
    figure, axes = _panels(len(fits), min(3, max(1, len(fits))), 2.8, options)
    for axis, fit in zip(axes.flat, fits.iter_rows(named=True), strict=False):
        _draw_fit(axis, summary, fit)
    _finish(
        figure,
        axes,
        len(fits),
        "nothing to fit: a generalisation measure (and coupling)\n"
        "is needed for at least three models",
        path=path,
        title=title,
        options=options,
    )


def _finish(
    figure: Any,
    axes: Any,
    count: int,
    empty_note: str,
    *,
    path: str | os.PathLike[str],
    title: str,
    options: Mapping[str, Any],
) -> None:
    """Hide the panels beyond the ``count`` drawn (with none, the first says
    ``empty_note``), title the figure and save it."""
    if count == 0:
        axes[0, 0].text(0.5, 0.5, empty_note, ha="center", va="center")
        axes[0, 0].set_axis_off()
    for axis in list(axes.flat)[count:]:
        axis.set_visible(count == 0 and axis is axes[0, 0])
    finish_figure(figure, title, path, options, tight=False)


def all_members(fits: pl.DataFrame) -> pl.DataFrame:
    """The fits over all members in the fits (``subset`` ``all``), the ones the figures
    draw; the named subsets' are in ``fits.csv`` only (Aubry et al. Table 4)."""
    return fits.filter(pl.col("subset") == ALL_MEMBERS)


def generalisation_fits(fits: pl.DataFrame, form: str) -> pl.DataFrame:
    """The fits of ``form`` (``linear``: Fig. 1a; ``exponential``: Fig. 8) over all members
    (``all_members``) against the coupling Aubry et al. §5.4 aggregate: −m of Eq. 13
    averaged over all layer pairs (−m̃ of Eq. 14 where m was not measured)."""
    drawn = all_members(fits).filter((pl.col("form") == form) & (pl.col("pairs") == "all"))
    measured = set(drawn["metric"].to_list())
    metric = GENERALISATION_METRIC if GENERALISATION_METRIC in measured else PAPER_METRIC
    return drawn.filter(pl.col("metric") == metric)


def plot_generalisation(
    summary: pl.DataFrame,
    fits: pl.DataFrame,
    *,
    path: str | os.PathLike[str],
    title: str,
    options: Mapping[str, Any],
) -> None:
    """Generalisation (held-out loss, external scores) against coupling
    (``generalisation_fits``; ``fits.csv`` has the other metrics' and the off-diagonal
    means' fits too), with the least-squares line, R² and p-value of each fit (Aubry et
    al., Fig. 1a)."""
    linear = generalisation_fits(fits, "linear")
    _plot_fits(summary, linear, path=path, title=title, options=options)


def score_fits(fits: pl.DataFrame) -> pl.DataFrame:
    """The fits the fits figure draws: each score's exponential fit against coupling as
    Aubry et al. §5.4 aggregate it (Fig. 8; ``generalisation_fits``), then its lines
    against log10 parameters, depth and width (§5.4)."""
    sizes = all_members(fits).filter(pl.col("predictor").is_in(list(HYPERPARAMETERS)))
    return pl.concat([generalisation_fits(fits, "exponential"), sizes])


def plot_score_fits(
    summary: pl.DataFrame,
    fits: pl.DataFrame,
    *,
    path: str | os.PathLike[str],
    title: str,
    options: Mapping[str, Any],
) -> None:
    """Each score against coupling (−m of Eq. 13 averaged over all layer pairs, as §5.4;
    −m̃ where m was not measured) with its exponential fit (Aubry et al., Fig. 8), then
    against log10 parameters, depth and width with the least-squares line (§5.4: coupling
    correlates with the score more than these): ``score_fits``."""
    _plot_fits(summary, score_fits(fits), path=path, title=title, options=options)


MEMBERS_K = 10
"""The K of the members figure's coupling (Aubry et al. §5.4), or the smallest measured."""


def member_quantities(summary: pl.DataFrame) -> list[str]:
    """The columns of the members figure that have a value: the law's ρ and r and PR_L /
    PR_1 (He & Su, Figs. 1 and 7), R_cos(W_E, φ_next) (Yao & Xu, Fig. 5B), the mean m̃
    over all layer pairs (paper's metric) at ``MEMBERS_K`` or the smallest K, and bits per
    byte."""
    ks = [
        coupling_column_parts(c)[1]
        for c in summary.columns
        if c.startswith("miscoupling_all_k") and coupling_column_parts(c)[2] == PAPER_METRIC
    ]
    candidates = ["rho", "pearson", "overall_decay", "rcos_we_next"]
    if ks:
        k = MEMBERS_K if MEMBERS_K in ks else min(ks)
        candidates.append(coupling_column("all", k, PAPER_METRIC))
    candidates.append("bits_per_byte")
    return [
        c
        for c in candidates
        if c in summary.columns and summary[c].cast(pl.Float64).fill_nan(None).count() > 0
    ]


def plot_members(
    summary: pl.DataFrame,
    *,
    path: str | os.PathLike[str],
    title: str,
    options: Mapping[str, Any],
) -> None:
    """The members side by side: a row per member (its model key), sorted by parameters,
    and a panel per quantity of ``member_quantities``, a dot per probing dataset (coloured,
    with a legend when the series has several)."""
    columns = member_quantities(summary)
    members = summary.sort("parameters", maintain_order=True)["model"].unique(maintain_order=True)
    datasets = summary["dataset"].unique(maintain_order=True).to_list()
    figure, axes = _panels(
        len(columns), min(3, max(1, len(columns))), 0.8 + 0.3 * len(members), options
    )
    for axis, column in zip(axes.flat, columns, strict=False):
        drawn = datasets if column in PER_DATASET else [None]
        for index, dataset in enumerate(drawn):
            rows = _dataset_rows(summary, dataset)
            shift = 0.2 * (index - (len(drawn) - 1) / 2)
            positions = [members.index_of(model) + shift for model in rows["model"]]
            axis.plot(rows[column], positions, "o", markersize=4, color=f"C{index}", label=dataset)
        axis.set_yticks(range(len(members)), members.to_list(), fontsize=7)
        axis.set_ylim(len(members) - 0.5, -0.5)
        axis.grid(axis="x", alpha=0.3)
        axis.set_title(_label(column), fontsize=9)
        if len(drawn) > 1:
            axis.legend(fontsize=6)
    _finish(
        figure,
        axes,
        len(columns),
        "no member has a law, R_cos, coupling or bits per byte",
        path=path,
        title=title,
        options=options,
    )
