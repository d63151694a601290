"""The figure of a run's representation geometry: each quantity of ``geometry.csv``
(``layerlaws.geometry.observer.QUANTITIES``) against the layer, one panel each.

``options`` are the config's plot options: ``format`` (svg, png, pdf), ``dpi`` and
``width`` (inches).
"""

from __future__ import annotations

import math
import os
from collections.abc import Mapping
from typing import Any

import polars as pl

from layerlaws.core.figures import finish_figure, plt

LABELS = {
    "effective_rank": "effective rank (RankMe)",
    "alpha_req": "α-ReQ decay α",
    "dataset_entropy": "dataset entropy (nats)",
    "prompt_entropy": "prompt entropy (nats)",
    "curvature": "curvature (radians)",
    "anisotropy": "anisotropy (mean cosine)",
    "cka_previous": "linear CKA, previous layer",
    "cka_last": "linear CKA, last layer",
}
"""Each quantity's panel title, in the order drawn."""


def plot_geometry(
    geometry: pl.DataFrame,
    *,
    path: str | os.PathLike[str],
    title: str,
    options: Mapping[str, Any],
) -> None:
    """Each quantity of ``geometry`` (a ``GeometryObserver.table()``; ``cka_last`` drawn
    when measured) against the layer, in panels of four a row."""
    names = [name for name in LABELS if name in geometry.columns]
    columns = 4
    rows = math.ceil(len(names) / columns)
    figure, axes = plt.subplots(
        rows,
        columns,
        figsize=(options["width"], options["width"] / columns * 0.9 * rows),
        squeeze=False,
    )
    ordered = geometry.sort("layer")
    for axis, name in zip(axes.flat, names, strict=False):
        axis.plot(ordered["layer"], ordered[name], "o-", markersize=3, linewidth=1)
        axis.set_title(LABELS[name], fontsize=8)
        axis.set_xlabel("layer", fontsize=8)
        axis.tick_params(labelsize=7)
    for axis in list(axes.flat)[len(names) :]:
        axis.axis("off")
    finish_figure(figure, f"{title}: representation geometry by layer", path, options)
