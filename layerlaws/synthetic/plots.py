"""Figures of the synthetic addition stage, in the style of Yao & Xu (Figs. 1B,
2, 3, 4). Inputs are the stage's tables and arrays, keyed by task (and model); ``options``
are the config's plot options (``format``, ``dpi``, ``width``).
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from typing import Any

import numpy as np
import polars as pl

from layerlaws.core.figures import plt, save_figure
from layerlaws.core.geometry import cosine_matrix, principal_plane

TASK_LABELS = {"add": "f_add", "add_same_range": "f̃_add", "mod": "f_mod"}
MODEL_LABELS = {"linear": "F_lin", "ffn": "F_ffn"}
KEY_SIGNATURE = {"add": "label", "add_same_range": "context", "mod": "context_given_label"}
"""The signature that differs across anchors in each task (paper §5)."""
SIGNATURE_LABELS = {"label": "φ^y", "context": "φ^X", "context_given_label": "φ^(X|y)"}


def _by_epoch(table: pl.DataFrame, column: str) -> pl.DataFrame:
    return (
        table.group_by("epoch")
        .agg(mean=pl.col(column).mean(), sd=pl.col(column).std(ddof=1).fill_null(0.0))
        .sort("epoch")
    )


def _epoch_axis(axis: Any) -> None:
    axis.set_xscale("symlog", linthresh=1)
    axis.set_xlabel("epoch")


def plot_dynamics(
    records: Mapping[tuple[str, str], pl.DataFrame],
    *,
    path: str | os.PathLike[str],
    options: Mapping[str, Any],
) -> None:
    """Top: training (solid) and test (dashed) accuracy per task and model (Fig. 1B);
    bottom: R_order(W_E over the anchors), mean ± sd over seeds (Fig. 2B)."""
    models = sorted({model for _, model in records}, key=list(MODEL_LABELS).index)
    figure, axes = plt.subplots(
        2, len(models), figsize=(options["width"], options["width"] * 0.6), squeeze=False
    )
    for column, model in enumerate(models):
        top, bottom = axes[0][column], axes[1][column]
        for (task, of), table in records.items():
            if of != model:
                continue
            train, test = _by_epoch(table, "train_accuracy"), _by_epoch(table, "test_accuracy")
            line = top.plot(train["epoch"], train["mean"], "-", label=TASK_LABELS[task])
            top.plot(test["epoch"], test["mean"], "--", color=line[0].get_color())
            order = _by_epoch(table, "r_order")
            bottom.plot(order["epoch"], order["mean"], "o-", markersize=3, label=TASK_LABELS[task])
            bottom.fill_between(
                order["epoch"],
                order["mean"] - order["sd"],
                order["mean"] + order["sd"],
                alpha=0.2,
                color=line[0].get_color(),
            )
        top.set_title(MODEL_LABELS[model], fontsize=9)
        top.set_ylabel("accuracy (train solid, test dashed)", fontsize=8)
        bottom.set_ylabel("R_order(W_E of the anchors)", fontsize=8)
        bottom.axhline(0, color="0.6", linewidth=0.8, linestyle=":")
        for axis in (top, bottom):
            _epoch_axis(axis)
            axis.legend(fontsize=7)
    figure.tight_layout()
    save_figure(figure, path, options)


def _heatmap(axis: Any, matrix: np.ndarray, title: str, own_range: bool = False) -> None:
    """A cosine matrix on −1…1, or (``own_range``, for signatures, whose cosines are all
    non-negative and often close to 1) on its own min…max, which the title states."""
    low, high = (matrix.min(), matrix.max()) if own_range else (-1.0, 1.0)
    axis.imshow(matrix, cmap="RdBu_r" if not own_range else "viridis", vmin=low, vmax=high)
    axis.set_title(f"{title}\n[{low:.2f}, {high:.2f}]" if own_range else title, fontsize=7)
    axis.set_xticks([])
    axis.set_yticks([])


def plot_embedding_heatmaps(
    weights: Mapping[tuple[str, str], Mapping[str, np.ndarray]],
    *,
    path: str | os.PathLike[str],
    options: Mapping[str, Any],
    columns: int = 5,
) -> None:
    """cos(W_E) over the anchors during training (Fig. 2A): one row per task and model,
    ``columns`` recorded epochs from first to last, the first seed."""
    keys = list(weights)
    figure, axes = plt.subplots(
        len(keys),
        columns,
        figsize=(options["width"], options["width"] / columns * len(keys)),
        squeeze=False,
    )
    for row, (task, model) in enumerate(keys):
        epochs = weights[task, model]["epochs"]
        shown = np.unique(np.round(np.linspace(0, len(epochs) - 1, columns)).astype(int))
        for column, index in enumerate(shown):
            anchors = weights[task, model]["anchor_embeddings"][index, 0]
            _heatmap(
                axes[row][column],
                cosine_matrix(anchors),
                f"{TASK_LABELS[task]}, {MODEL_LABELS[model]}, epoch {epochs[index]}",
            )
        for column in range(len(shown), columns):
            axes[row][column].axis("off")
    figure.suptitle("cos(W_E) of the anchors during training (first seed)", fontsize=10)
    figure.tight_layout()
    save_figure(figure, path, options)


def plot_signatures(
    signatures: Mapping[str, Mapping[str, np.ndarray]],
    weights: Mapping[tuple[str, str], Mapping[str, np.ndarray]],
    *,
    path: str | os.PathLike[str],
    options: Mapping[str, Any],
) -> None:
    """Per task (rows): cos over the anchors of φ^y, φ^X, φ^{X|y} (Fig. 3A), then the PCA
    of the task's distinct signature beside that of the final W_E of F_ffn (Fig. 3B),
    points coloured by anchor."""
    tasks = list(signatures)
    figure, axes = plt.subplots(
        len(tasks), 5, figsize=(options["width"], options["width"] / 5 * len(tasks)), squeeze=False
    )
    for row, task in enumerate(tasks):
        for column, (name, label) in enumerate(SIGNATURE_LABELS.items()):
            _heatmap(
                axes[row][column],
                cosine_matrix(signatures[task][name]),
                f"{TASK_LABELS[task]}: cos({label})",
                own_range=True,
            )
        anchors = signatures[task]["anchors"]
        key = KEY_SIGNATURE[task]
        panels = [(signatures[task][key], f"PCA of {SIGNATURE_LABELS[key]}")]
        if (task, "ffn") in weights:
            panels.append((weights[task, "ffn"]["anchor_embeddings"][-1, 0], "PCA of W_E (F_ffn)"))
        for column, (points, title) in enumerate(panels, start=3):
            axis = axes[row][column]
            projected = principal_plane(points)
            axis.scatter(projected[:, 0], projected[:, 1], c=anchors, cmap="viridis", s=12)
            for (x, y), anchor in zip(projected, anchors, strict=True):
                axis.annotate(str(anchor), (x, y), fontsize=5)
            axis.set_title(title, fontsize=7)
            axis.set_xticks([])
            axis.set_yticks([])
        for column in range(3 + len(panels), 5):
            axes[row][column].axis("off")
    figure.tight_layout()
    save_figure(figure, path, options)


def plot_unembedding(
    signatures: Mapping[str, Mapping[str, np.ndarray]],
    weights: Mapping[tuple[str, str], Mapping[str, np.ndarray]],
    *,
    path: str | os.PathLike[str],
    options: Mapping[str, Any],
) -> None:
    """Per task (rows): cos(W_U) over the label domain of each model at the last recorded
    epoch (first seed), and cos(φ^X_ν) (Fig. 4A–B)."""
    tasks = list(signatures)
    models = sorted({model for _, model in weights}, key=list(MODEL_LABELS).index)
    columns = len(models) + 1
    figure, axes = plt.subplots(
        len(tasks),
        columns,
        figsize=(options["width"] * columns / 4, options["width"] / 4 * len(tasks)),
        squeeze=False,
    )
    for row, task in enumerate(tasks):
        for column, model in enumerate(models):
            if (task, model) in weights:
                unembedding = weights[task, model]["label_unembeddings"][-1, 0]
                _heatmap(
                    axes[row][column],
                    cosine_matrix(unembedding),
                    f"{TASK_LABELS[task]}: cos(W_U), {MODEL_LABELS[model]}",
                )
        _heatmap(
            axes[row][-1],
            cosine_matrix(signatures[task]["label_context"]),
            f"{TASK_LABELS[task]}: cos(φ^X_ν)",
            own_range=True,
        )
    figure.tight_layout()
    save_figure(figure, path, options)
