"""The figure of a training run: its loss curves against tokens seen."""

from __future__ import annotations

import os
from collections.abc import Mapping
from typing import Any

import polars as pl
from matplotlib.ticker import EngFormatter

from layerlaws.core.figures import plt, save_figure


def plot_training_curve(
    curve: pl.DataFrame,
    unigram_entropy: float,
    held_out_unigram_loss: float | None,
    *,
    path: str | os.PathLike[str],
    title: str,
    options: Mapping[str, Any],
) -> None:
    """Training loss per step and held-out loss where evaluated, against tokens seen, with
    the training corpus's unigram entropy and the held-out loss of its unigram model (the
    best context-free model) for reference."""
    figure, axis = plt.subplots(figsize=(options["width"] / 2, 3.5))
    trained = curve.filter(pl.col("train_loss").is_not_null())
    held = curve.filter(pl.col("held_out_loss").is_not_null())
    axis.plot(trained["tokens_seen"], trained["train_loss"], "-", linewidth=0.8, label="training")
    if len(held):
        axis.plot(held["tokens_seen"], held["held_out_loss"], "o-", markersize=3, label="held out")
    axis.axhline(
        unigram_entropy, color="grey", linestyle="--", linewidth=1, label="unigram entropy"
    )
    if held_out_unigram_loss is not None:
        axis.axhline(
            held_out_unigram_loss,
            color="grey",
            linestyle=":",
            linewidth=1,
            label="unigram model, held out",
        )
    axis.xaxis.set_major_formatter(EngFormatter())
    axis.set_xlabel("tokens seen")
    axis.set_ylabel("cross-entropy (nats)")
    axis.set_title(title, fontsize=10)
    axis.legend(fontsize=7)
    save_figure(figure, path, options)
