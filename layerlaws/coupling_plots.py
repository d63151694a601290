"""Figures of the block-coupling and trajectory stage (paper 004, Figs. 1, 3, 4, 17).

``options`` are the config's plot options (``format``, ``dpi``, ``width``). Every figure
sets the trained model beside its randomly initialised twin.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from typing import Any

import numpy as np
import polars as pl

from layerlaws.plots import plt, save_figure
from layerlaws.trajectories import pca_projection

WEIGHTS = ("trained", "random")


def _square(table: pl.DataFrame, row: str, column: str) -> np.ndarray:
    size = int(max(table[row].max(), table[column].max())) + 1
    offset = int(min(table[row].min(), table[column].min()))
    matrix = np.full((size - offset, size - offset), np.nan)
    matrix[table[row].to_numpy() - offset, table[column].to_numpy() - offset] = table[
        "miscoupling"
    ].to_numpy()
    return matrix


def plot_depth(
    depth: pl.DataFrame, title: str, path: str | os.PathLike[str], options: Mapping[str, Any]
) -> None:
    """Depth-wise mis-coupling M[l, l′] of the last token, mean over prompts (Fig. 3)."""
    k = depth["k"].min()
    figure, axes = plt.subplots(1, 2, figsize=(options["width"], options["width"] / 2.2))
    for axis, weights in zip(axes, WEIGHTS, strict=True):
        block = depth.filter(
            (pl.col("weights") == weights) & (pl.col("prompt") == "mean") & (pl.col("k") == k)
        )
        image = axis.imshow(
            _square(block, "layer_a", "layer_b"),
            vmin=0,
            vmax=1,
            cmap="viridis_r",
            origin="lower",
            extent=(0.5, block["layer_b"].max() + 0.5, 0.5, block["layer_a"].max() + 0.5),
        )
        off = block.filter(pl.col("layer_a") != pl.col("layer_b"))["miscoupling"].mean()
        axis.set_title(f"{weights}: mean off-diagonal m̃ = {off:.3f}", fontsize=9)
        axis.set_xlabel("layer of the singular vectors")
        axis.set_ylabel("layer of the Jacobian")
        figure.colorbar(image, ax=axis, shrink=0.8)
    figure.suptitle(f"{title}: depth-wise mis-coupling, last token, K={k}", fontsize=10)
    save_figure(figure, path, options)


def plot_tokens(
    tokens: pl.DataFrame, title: str, path: str | os.PathLike[str], options: Mapping[str, Any]
) -> None:
    """Token-wise mis-coupling at the first chosen layer, first prompt (Fig. 4)."""
    k, layer = tokens["k"].min(), tokens["layer"].min()
    kinds = tokens["kind"].unique(maintain_order=True).to_list()
    figure, axes = plt.subplots(
        2, len(kinds), figsize=(options["width"], options["width"] / 1.6), squeeze=False
    )
    for row, weights in enumerate(WEIGHTS):
        for column, kind in enumerate(kinds):
            block = tokens.filter(
                (pl.col("weights") == weights)
                & (pl.col("prompt") == "0")
                & (pl.col("kind") == kind)
                & (pl.col("k") == k)
                & (pl.col("layer") == layer)
            )
            axis = axes[row][column]
            axis.imshow(_square(block, "token_a", "token_b"), vmin=0, vmax=1, cmap="viridis_r")
            axis.set_title(f"{weights}, {kind}", fontsize=8)
            axis.set_xlabel("token (singular vectors)", fontsize=7)
            axis.set_ylabel("token (Jacobian)", fontsize=7)
    figure.suptitle(f"{title}: token-wise mis-coupling, layer {layer}, K={k}", fontsize=10)
    figure.tight_layout()
    save_figure(figure, path, options)


def plot_adjacency(
    depth: pl.DataFrame, title: str, path: str | os.PathLike[str], options: Mapping[str, Any]
) -> None:
    """Mean mis-coupling against layer distance |l − l′| (Fig. 1c–e): coupling is expected
    to be strongest between adjacent layers of a trained model."""
    figure, axis = plt.subplots(figsize=(options["width"] / 2, 3.5))
    distances = (
        depth.filter(pl.col("prompt") == "mean")
        .with_columns(distance=(pl.col("layer_a") - pl.col("layer_b")).abs())
        .filter(pl.col("distance") > 0)
        .group_by("weights", "k", "distance")
        .agg(pl.col("miscoupling").mean())
        .sort("distance")
    )
    for (weights, k), block in distances.sort("weights", "k").group_by(
        ["weights", "k"], maintain_order=True
    ):
        axis.plot(
            block["distance"],
            block["miscoupling"],
            "o-" if weights == "trained" else "x--",
            markersize=3,
            label=f"{weights}, K={k}",
        )
    axis.set_xlabel("layer distance |l − l′|")
    axis.set_ylabel("mean mis-coupling")
    axis.set_title(title, fontsize=10)
    axis.legend(fontsize=7)
    save_figure(figure, path, options)


def plot_shape(
    trajectories: pl.DataFrame, title: str, path: str | os.PathLike[str], options: Mapping[str, Any]
) -> None:
    """Distributions of the line-shape score and the expodistance over all tokens."""
    figure, axes = plt.subplots(1, 2, figsize=(options["width"], 3.2))
    for axis, column in zip(axes, ("lss", "expodistance"), strict=True):
        for weights in WEIGHTS:
            values = trajectories.filter(pl.col("weights") == weights)[column].to_numpy()
            axis.hist(
                values[np.isfinite(values)],
                bins=20,
                alpha=0.6,
                label=f"{weights} (median {np.nanmedian(values):.2f})",
            )
        axis.set_xlabel(
            {
                "lss": "line-shape score (1 = straight)",
                "expodistance": "expodistance (0 = exponential growth)",
            }[column]
        )
        axis.legend(fontsize=7)
    figure.suptitle(title, fontsize=10)
    figure.tight_layout()
    save_figure(figure, path, options)


def plot_pca(
    streams: Mapping[str, np.ndarray],
    title: str,
    path: str | os.PathLike[str],
    options: Mapping[str, Any],
) -> None:
    """Token trajectories of the first prompt on the top two principal components of their
    last layer (Fig. 17 style, Appendix A.2.1); darker points are deeper layers, the last
    token's line is black and the first token's orange (in trained models it often carries
    massive activations, an attention sink, and lies far from the others)."""
    figure, axes = plt.subplots(1, 2, figsize=(options["width"], options["width"] / 2.2))
    for axis, weights in zip(axes, WEIGHTS, strict=True):
        stream = streams[f"{weights}/0"]  # (L + 1, T, d)
        projected = pca_projection(np.transpose(stream, (1, 0, 2)))
        depth = np.linspace(0.2, 1, projected.shape[1])
        last = len(projected) - 1
        for index, token in enumerate(projected):
            color, label = {0: ("tab:orange", "first token"), last: ("black", "last token")}.get(
                index, ("0.7", None)
            )
            axis.plot(token[:, 0], token[:, 1], "-", color=color, linewidth=0.6, label=label)
            axis.scatter(token[:, 0], token[:, 1], c=depth, cmap="Blues", s=6)
        axis.set_title(weights, fontsize=9)
        axis.set_xlabel("PC 1 of the last layer")
        axis.set_ylabel("PC 2 of the last layer")
        axis.legend(fontsize=7)
    figure.suptitle(f"{title}: trajectories of the first prompt's tokens", fontsize=10)
    save_figure(figure, path, options)
