"""Figures of the equi-learning stage (He & Su): the law, norms, fuzziness, token views, summary.

``options`` are the config's plot options: ``format`` (svg, png, pdf), ``dpi`` and
``width`` (inches).
"""

from __future__ import annotations

import math
import os
from collections.abc import Mapping
from typing import Any

import numpy as np
import polars as pl
from matplotlib.ticker import FixedLocator, FormatStrFormatter, NullFormatter

from layerlaws.core.figures import finish_figure, plt, save_figure
from layerlaws.equilearning.law import NEXT_TOKEN


def _curve(pr: pl.DataFrame, offset: int, norm: str, control: str) -> tuple[np.ndarray, ...]:
    block = pr.filter(
        (pl.col("offset") == offset)
        & (pl.col("norm") == norm)
        & (pl.col("control") == control)
        & (pl.col("layer") >= 1)
    ).sort("layer")
    return block["layer"].to_numpy(), block["pr"].to_numpy()


def _log_axis(axis: Any) -> None:
    """Log-scale y axis with five labelled ticks spread over the drawn range (PR spans well
    under a decade, where a log axis's own ticks would carry no label). Call after
    drawing."""
    axis.set_yscale("log")
    low, high = axis.get_ylim()
    axis.yaxis.set_major_locator(FixedLocator(np.geomspace(low, high, 5)[1:-1]))
    axis.yaxis.set_major_formatter(FormatStrFormatter("%.4g"))
    axis.yaxis.set_minor_formatter(NullFormatter())


def _preferred(values: list[str], preferred: str) -> str:
    return preferred if preferred in values else values[0]


def _fit_row(law: pl.DataFrame, **keys: Any) -> dict[str, Any] | None:
    """The row of a law table with these key values, or None."""
    rows = law.filter(*[pl.col(name) == value for name, value in keys.items()])
    return rows.row(0, named=True) if len(rows) else None


def _plot_with_fit(
    axis: Any,
    layers: np.ndarray,
    values: np.ndarray,
    label: str,
    fit: Mapping[str, Any] | None,
    **style: Any,
) -> None:
    """The points and the fitted line exp(intercept + slope · layer) of a law table's row
    (``law.csv``, ``fuzziness_law.csv``), labelled with its ρ and r."""
    rho = fit["rho"] if fit else float("nan")
    pearson = fit["pearson"] if fit else float("nan")
    points = axis.plot(
        layers, values, "o", markersize=3, label=f"{label}\nρ={rho:.4f} r={pearson:.3f}", **style
    )
    if fit and math.isfinite(fit["slope"]):
        axis.plot(
            layers,
            np.exp(fit["intercept"] + fit["slope"] * layers),
            "-",
            linewidth=1,
            color=points[0].get_color(),
        )


def plot_law(
    pr: pl.DataFrame,
    law: pl.DataFrame,
    *,
    path: str | os.PathLike[str],
    title: str,
    options: Mapping[str, Any],
) -> None:
    """Log PR against layer with the fitted line, one panel per target offset (paper Fig.
    1/Fig. 8 style); the shuffled-vocabulary control, if measured, in grey."""
    offsets = sorted(pr["offset"].unique().to_list())
    norm = _preferred(pr["norm"].unique().to_list(), "model")
    controls = pr["control"].unique().to_list()
    figure, axes = plt.subplots(
        1, len(offsets), figsize=(options["width"], 4.2), squeeze=False, sharex=True
    )
    for axis, offset in zip(axes[0], offsets, strict=True):
        for control, label, style in (
            ("none", "tokens", {}),
            ("shuffled_vocab", "shuffled", {"color": "0.6"}),
        ):
            if control in controls:
                fit = _fit_row(law, offset=offset, norm=norm, control=control)
                _plot_with_fit(axis, *_curve(pr, offset, norm, control), label, fit, **style)
        _log_axis(axis)
        axis.set_title(f"x[t{offset:+d}]", fontsize=9)
        axis.set_xlabel("layer")
        axis.legend(fontsize=6, loc="upper center", bbox_to_anchor=(0.5, -0.18), frameon=False)
    axes[0][0].set_ylabel("prediction residual")
    finish_figure(figure, f"{title} (norm: {norm})", path, options)


def plot_norms(
    pr: pl.DataFrame,
    law: pl.DataFrame,
    *,
    path: str | os.PathLike[str],
    title: str,
    options: Mapping[str, Any],
) -> None:
    """Next-token log PR against layer under each norm, with the fitted lines of ``law``."""
    offsets = pr["offset"].unique().to_list()
    offset = NEXT_TOKEN if NEXT_TOKEN in offsets else offsets[0]
    figure, axis = plt.subplots(figsize=(options["width"] / 2, 3.5))
    for norm in sorted(pr["norm"].unique().to_list()):
        fit = _fit_row(law, offset=offset, norm=norm, control="none")
        _plot_with_fit(axis, *_curve(pr, offset, norm, "none"), norm, fit)
    _log_axis(axis)
    axis.set_xlabel("layer")
    axis.set_ylabel(f"prediction residual of x[t{offset:+d}]")
    axis.set_title(f"{title}: normalisation", fontsize=10)
    axis.legend(fontsize=8)
    save_figure(figure, path, options)


def plot_summary(
    tables: Mapping[tuple[str, str], pl.DataFrame],
    summary: pl.DataFrame,
    *,
    path: str | os.PathLike[str],
    options: Mapping[str, Any],
) -> None:
    """Next-token log PR against relative depth l / L for every (model, dataset) of
    ``tables``, labelled with Pearson r from ``summary`` (``summary.csv``)."""
    figure, axis = plt.subplots(figsize=(options["width"] / 2, 3.5))
    for (model, dataset), pr in tables.items():
        norm = _preferred(pr["norm"].unique().to_list(), "model")
        layers, values = _curve(pr, NEXT_TOKEN, norm, "none")
        if len(layers) == 0:
            continue
        fit = _fit_row(
            summary, model=model, dataset=dataset, offset=NEXT_TOKEN, norm=norm, control="none"
        )
        axis.plot(
            layers / layers.max(),
            values,
            "o-",
            markersize=3,
            linewidth=1,
            label=f"{model} / {dataset} (r={fit['pearson'] if fit else float('nan'):.3f})",
        )
    _log_axis(axis)
    axis.set_xlabel("relative depth l / L")
    axis.set_ylabel("next-token prediction residual")
    axis.legend(fontsize=7)
    save_figure(figure, path, options)


def plot_fuzziness(
    pr: pl.DataFrame,
    law: pl.DataFrame,
    fuzziness: pl.DataFrame,
    fuzziness_law: pl.DataFrame,
    *,
    path: str | os.PathLike[str],
    title: str,
    options: Mapping[str, Any],
) -> None:
    """Separation fuzziness against layer with its fitted line, beside the next-token PR
    (both log scale, norm ``model`` if measured; He & Su Fig. S8)."""
    norm = _preferred(fuzziness["norm"].unique().to_list(), "model")
    figure, (left, right) = plt.subplots(1, 2, figsize=(options["width"], 3.5))
    block = fuzziness.filter((pl.col("norm") == norm) & (pl.col("layer") >= 1)).sort("layer")
    _plot_with_fit(
        left,
        block["layer"].to_numpy(),
        block["fuzziness"].to_numpy(),
        "fuzziness",
        _fit_row(fuzziness_law, norm=norm),
    )
    _log_axis(left)
    left.set_ylabel("separation fuzziness Tr(SS_w SS_b⁺)")
    left.set_title(
        f"{block['n_classes'][0]} next-token classes, {block['n_rows'][0]} rows", fontsize=9
    )
    offsets = pr["offset"].unique().to_list()
    offset = NEXT_TOKEN if NEXT_TOKEN in offsets else offsets[0]
    fit = _fit_row(law, offset=offset, norm=norm, control="none")
    _plot_with_fit(right, *_curve(pr, offset, norm, "none"), "prediction residual", fit)
    _log_axis(right)
    right.set_ylabel(f"prediction residual of x[t{offset:+d}]")
    for axis in (left, right):
        axis.set_xlabel("layer")
        axis.legend(fontsize=7)
    finish_figure(figure, f"{title} (norm: {norm})", path, options)


def plot_token_views(
    views: pl.DataFrame,
    *,
    path: str | os.PathLike[str],
    title: str,
    options: Mapping[str, Any],
) -> None:
    """Each token group (rows) at each viewed layer (columns) on the plane of its first two
    principal components, coloured by word (He & Su, Fig. 2 and S1–S6)."""
    groups = views["group"].unique(maintain_order=True).to_list()
    layers = sorted(views["layer"].unique().to_list())
    if not groups:
        figure, axis = plt.subplots(figsize=(options["width"] / 2, 2))
        axis.text(0.5, 0.5, "no token views (none of the words occurs)", ha="center")
        axis.axis("off")
        save_figure(figure, path, options)
        return
    size = options["width"] / max(len(layers), 1)
    figure, axes = plt.subplots(
        len(groups), len(layers), figsize=(options["width"], size * len(groups)), squeeze=False
    )
    for row, group in enumerate(groups):
        for column, layer in enumerate(layers):
            axis = axes[row][column]
            block = views.filter((pl.col("group") == group) & (pl.col("layer") == layer))
            for word, points in block.group_by("word", maintain_order=True):
                axis.scatter(points["pc1"], points["pc2"], s=3, alpha=0.6, label=word[0])
            axis.set_title(f"layer {layer}", fontsize=8)
            axis.set_xticks([])
            axis.set_yticks([])
            if column == 0:
                axis.legend(fontsize=7, markerscale=3)
    finish_figure(
        figure, f"{title}: token views on their first two principal components", path, options
    )
