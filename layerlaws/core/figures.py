"""Figures: the one matplotlib backend (Agg, no display), atomic saving and the common
ending of a figure (title, layout, save).

``options`` are the config's plot options: ``format`` (svg, png, pdf), ``dpi`` and
``width`` (inches). Every figure module imports ``plt`` from here, so the backend is set
before pyplot is first imported.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from typing import Any

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt

from layerlaws.core.atomic import atomic_path

__all__ = ["finish_figure", "plt", "save_figure"]


def save_figure(figure: Any, path: str | os.PathLike[str], options: Mapping[str, Any]) -> None:
    """Write a figure atomically in the configured format, then close it."""
    with atomic_path(path) as temporary:
        figure.savefig(temporary, format=options["format"], dpi=options["dpi"], bbox_inches="tight")
    plt.close(figure)


def finish_figure(
    figure: Any,
    heading: str | None,
    path: str | os.PathLike[str],
    options: Mapping[str, Any],
    *,
    tight: bool = True,
) -> None:
    """The common ending of a figure: its ``heading`` as the title (10 pt; None, none),
    ``tight_layout`` (``tight=False`` keeps the layout: colour bars, a constrained layout),
    then ``save_figure``."""
    if heading is not None:
        figure.suptitle(heading, fontsize=10)
    if tight:
        figure.tight_layout()
    save_figure(figure, path, options)
