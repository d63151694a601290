"""Figures of the synthetic addition stage, in the style of Yao & Xu (Figs. 1–4, 7, 8,
9B). Inputs are the stage's tables and arrays, keyed by task (and model); ``options`` are
the config's plot options (``format``, ``dpi``, ``width``). The PCA figures show the first
seed's weights at the snapshot epoch (the paper's epoch 120, or the last epoch of a
shorter training), which each ``weights.npz`` records as ``snapshot_epoch``.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from typing import Any

import numpy as np
import polars as pl

from layerlaws.core.errors import LayerlawsError
from layerlaws.core.figures import finish_figure, plt
from layerlaws.core.geometry import cosine_matrix, principal_plane
from layerlaws.synthetic.settings import ShownLabels

TASK_LABELS = {"add": "f_add", "add_same_range": "f̃_add", "mod": "f_mod"}
MODEL_LABELS = {"linear": "F_lin", "ffn": "F_ffn"}
KEY_SIGNATURE = {"add": "label", "add_same_range": "context", "mod": "context_given_label"}
"""The signature that differs across anchors in each task (paper §5)."""
SIGNATURE_LABELS = {"label": "φ^y", "context": "φ^X", "context_given_label": "φ^(X|y)"}
INPUT_LABELS = {"all": "x′ over every token (Eq. 4)", "keys": "x′ over the keys"}
SHOWN_LABELS_OF_PROFILE = 5
"""Labels ν whose φ^X_ν the signature profiles draw, evenly spaced over the domain."""


def _by_epoch(table: pl.DataFrame, column: str) -> pl.DataFrame:
    return (
        table.group_by("epoch")
        .agg(mean=pl.col(column).mean(), sd=pl.col(column).std(ddof=1).fill_null(0.0))
        .sort("epoch")
    )


def _has_test(table: pl.DataFrame) -> bool:
    """Whether a run had test inputs (its test accuracy is NaN without them)."""
    return not table["test_accuracy"].is_nan().all()


def _epoch_axis(axis: Any) -> None:
    axis.set_xscale("symlog", linthresh=1)
    axis.set_xlabel("epoch")


def plot_dynamics(
    records: Mapping[tuple[str, str], pl.DataFrame],
    *,
    path: str | os.PathLike[str],
    options: Mapping[str, Any],
) -> None:
    """Top: training (solid) and test (dashed, absent without test inputs) accuracy per
    task and model (Fig. 1B); bottom: R_order(W_E over the anchors), mean ± sd over seeds
    (Fig. 2B)."""
    models = sorted({model for _, model in records}, key=list(MODEL_LABELS).index)
    figure, axes = plt.subplots(
        2, len(models), figsize=(options["width"], options["width"] * 0.6), squeeze=False
    )
    for column, model in enumerate(models):
        top, bottom = axes[0][column], axes[1][column]
        for (task, of), table in records.items():
            if of != model:
                continue
            train = _by_epoch(table, "train_accuracy")
            line = top.plot(train["epoch"], train["mean"], "-", label=TASK_LABELS[task])
            if _has_test(table):
                test = _by_epoch(table, "test_accuracy")
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
        tested = any(_has_test(table) for (_, of), table in records.items() if of == model)
        top.set_ylabel(
            "accuracy (train solid, test dashed)"
            if tested
            else "training accuracy (no held-out inputs)",
            fontsize=8,
        )
        bottom.set_ylabel("R_order(W_E of the anchors)", fontsize=8)
        bottom.axhline(0, color="0.6", linewidth=0.8, linestyle=":")
        for axis in (top, bottom):
            _epoch_axis(axis)
            axis.legend(fontsize=7)
    finish_figure(figure, None, path, options)


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
    finish_figure(figure, "cos(W_E) of the anchors during training (first seed)", path, options)


def plot_signatures(
    signatures: Mapping[str, Mapping[str, np.ndarray]],
    weights: Mapping[tuple[str, str], Mapping[str, np.ndarray]],
    *,
    path: str | os.PathLike[str],
    options: Mapping[str, Any],
) -> None:
    """Per task (rows): cos over the anchors of φ^y, φ^X, φ^{X|y} (Fig. 3A), then the PCA
    of the task's distinct signature beside that of F_ffn's W_E at the snapshot epoch
    (Fig. 3B), points coloured by anchor."""
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
            embedding, epoch = snapshot(weights[task, "ffn"], "anchor_embeddings")
            panels.append((embedding, f"PCA of W_E (F_ffn, epoch {epoch})"))
        for column, (points, title) in enumerate(panels, start=3):
            _pca_panel(axes[row][column], points, anchors, title)
        for column in range(3 + len(panels), 5):
            axes[row][column].axis("off")
    finish_figure(figure, None, path, options)


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
    finish_figure(figure, None, path, options)


def snapshot(weights_of: Mapping[str, np.ndarray], name: str) -> tuple[np.ndarray, int]:
    """The first seed's ``name`` (``anchor_embeddings`` (|A|, d) or ``label_unembeddings``
    (labels, d)) at the snapshot epoch of one model's ``weights.npz``, and that epoch."""
    epoch = int(weights_of["snapshot_epoch"])
    index = int(np.flatnonzero(weights_of["epochs"] == epoch)[0])
    return weights_of[name][index, 0], epoch


def _pca_panel(axis: Any, points: np.ndarray | None, values: np.ndarray, title: str) -> None:
    """``points`` (n, d) on their first two principal components, coloured and labelled
    by ``values`` (n,) (anchors or labels); a blank panel saying so when ``points`` is
    None (the model was not trained)."""
    axis.set_xticks([])
    axis.set_yticks([])
    if points is None:
        axis.text(0.5, 0.5, "not trained", ha="center", va="center", fontsize=7)
        axis.set_title(title, fontsize=7)
        return
    projected = principal_plane(points)
    axis.scatter(projected[:, 0], projected[:, 1], c=values, cmap="viridis", s=12)
    for (x, y), value in zip(projected, values, strict=True):
        axis.annotate(str(value), (x, y), fontsize=5)
    axis.set_title(title, fontsize=7)


def _pca_grid(
    panels: list[list[tuple[np.ndarray | None, np.ndarray, str]]],
    title: str,
    path: str | os.PathLike[str],
    options: Mapping[str, Any],
) -> None:
    """A figure of PCA panels (``_pca_panel``), one list of (points, values, title) per
    row."""
    columns = max(len(row) for row in panels)
    size = options["width"] / max(columns, 3)
    figure, axes = plt.subplots(
        len(panels), columns, figsize=(size * columns, size * len(panels)), squeeze=False
    )
    for row, entries in enumerate(panels):
        for column, (points, values, name) in enumerate(entries):
            _pca_panel(axes[row][column], points, values, name)
        for column in range(len(entries), columns):
            axes[row][column].axis("off")
    figure.suptitle(title, fontsize=9)
    finish_figure(figure, None, path, options)


def _weights_at_snapshot(
    weights: Mapping[tuple[str, str], Mapping[str, np.ndarray]],
    task: str,
    model: str,
    name: str,
) -> tuple[np.ndarray | None, str]:
    """``snapshot`` of (``task``, ``model``) and its panel title; None when the model was
    not trained."""
    weight = "W_E" if name == "anchor_embeddings" else "W_U"
    if (task, model) not in weights:
        return None, f"{TASK_LABELS[task]}: {weight} ({MODEL_LABELS[model]})"
    points, epoch = snapshot(weights[task, model], name)
    return points, f"{TASK_LABELS[task]}: {weight} ({MODEL_LABELS[model]}, epoch {epoch})"


def plot_unembedding_pca(
    signatures: Mapping[str, Mapping[str, np.ndarray]],
    weights: Mapping[tuple[str, str], Mapping[str, np.ndarray]],
    *,
    path: str | os.PathLike[str],
    options: Mapping[str, Any],
) -> None:
    """Per task (rows): the PCA of φ^X_ν beside that of F_lin's W_U over the label domain
    at the snapshot epoch (Fig. 4C, epoch 120), points coloured by label ν."""
    rows = []
    for task, found in signatures.items():
        domain = found["label_domain"]
        unembedding, title = _weights_at_snapshot(weights, task, "linear", "label_unembeddings")
        rows.append(
            [
                (found["label_context"], domain, f"{TASK_LABELS[task]}: φ^X_ν"),
                (unembedding, domain, title),
            ]
        )
    _pca_grid(rows, "PCA of φ^X_ν and W_U over the labels (first seed)", path, options)


def plot_weight_pca(
    weights: Mapping[tuple[str, str], Mapping[str, np.ndarray]],
    tasks: list[str],
    model: str,
    name: str,
    *,
    path: str | os.PathLike[str],
    options: Mapping[str, Any],
) -> None:
    """One row, a panel per task: the PCA of ``model``'s ``name`` at the snapshot epoch,
    the first seed: ``anchor_embeddings`` W_E over the anchors (Fig. 8: F_lin) or
    ``label_unembeddings`` W_U over the labels (Fig. 9B: F_ffn), coloured by token."""
    values = "anchors" if name == "anchor_embeddings" else "label_domain"
    row = []
    for task in tasks:
        points, title = _weights_at_snapshot(weights, task, model, name)
        shown = weights[task, model][values] if points is not None else np.array([])
        row.append((points, shown, title))
    weight = "W_E over the anchors" if name == "anchor_embeddings" else "W_U over the labels"
    _pca_grid([row], f"PCA of {weight} in {MODEL_LABELS[model]} (first seed)", path, options)


def anchor_rows(found: Mapping[str, np.ndarray], task: str, name: str, label: int) -> np.ndarray:
    """The rows (|A|, vocab) of the anchor signature ``name`` of ``task``'s
    ``signatures.npz``; φ^{X|y}_α at y = ``label`` (which must be a label of the task)."""
    rows = found[name]
    if name != "context_given_label":
        return rows
    domain = found["label_domain"]
    if label not in domain:
        raise LayerlawsError(
            f"synthetic.shown_labels.{task}: {label} is not a label of {TASK_LABELS[task]} "
            f"(its labels are {domain.min()}…{domain.max()})"
        )
    vocab = found["label"].shape[1]
    return rows.reshape(len(rows), vocab, vocab)[:, label]


def _profile(
    axis: Any,
    rows: np.ndarray,
    names: list[str],
    colours: np.ndarray,
    own: np.ndarray | None,
    title: str,
) -> None:
    """Probability rows (k, vocab) drawn against the tokens where any is non-zero, side by
    side (the gap between the anchors and the keys left out, a dotted line where tokens
    are skipped); ``own`` (k,), the token of each row whose value is P(α ∈ X | α ∈ X) = 1:
    the y axis is cut below these, which the title says. Rows that are all zero (no
    training sample holds the label: a small ``synthetic.n_samples``) leave the panel
    empty, saying so."""
    tokens = np.flatnonzero(rows.any(axis=0))
    if not len(tokens):
        axis.text(0.5, 0.5, "no training sample holds this label", ha="center", va="center",
                  transform=axis.transAxes, fontsize=7)  # fmt: skip
        axis.set_title(title, fontsize=7)
        return
    positions = np.arange(len(tokens))
    for values, name, colour in zip(rows, names, colours, strict=True):
        axis.plot(
            positions,
            values[tokens],
            "-",
            marker=".",
            markersize=2,
            linewidth=0.8,
            color=colour,
            label=name,
        )
    for gap in np.flatnonzero(np.diff(tokens) > 1):
        axis.axvline(gap + 0.5, color="0.6", linewidth=0.6, linestyle=":")
    ticks = np.unique(np.linspace(0, len(tokens) - 1, 7).astype(int))
    axis.set_xticks(ticks, [str(token) for token in tokens[ticks]])
    others = rows.copy()
    if own is not None:
        others[np.arange(len(rows)), own] = 0.0
    if rows.max() > others.max():
        axis.set_ylim(0.0, others.max() * 1.15)
        title += "\n(α's own token, P = 1, off the axis)"
    axis.set_title(title, fontsize=7)
    axis.set_xlabel("token", fontsize=7)
    axis.tick_params(labelsize=6)


def _signature_panel(
    axis: Any,
    found: Mapping[str, np.ndarray],
    task: str,
    name: str,
    label: int,
    shown: np.ndarray,
) -> None:
    """``_profile`` of the anchor signature ``name`` of ``task`` for the anchor indices
    ``shown``."""
    anchors = found["anchors"][shown]
    given = f" at y = {label}" if name == "context_given_label" else ""
    _profile(
        axis,
        anchor_rows(found, task, name, label)[shown],
        [f"α = {anchor}" for anchor in anchors],
        plt.get_cmap("coolwarm_r")(np.linspace(0.0, 1.0, len(anchors))),
        anchors if name != "label" else None,
        f"{TASK_LABELS[task]}: {SIGNATURE_LABELS[name]}_α{given}",
    )


def plot_distinct_signatures(
    signatures: Mapping[str, Mapping[str, np.ndarray]],
    shown_labels: ShownLabels,
    *,
    path: str | os.PathLike[str],
    options: Mapping[str, Any],
) -> None:
    """One panel per task: its signature that differs across anchors (f_add φ^y, f̃_add
    φ^X, f_mod φ^{X|y} at y = ``shown_labels``) for the first and last anchor (Fig. 1A:
    α = 11 red, 20 blue)."""
    tasks = list(signatures)
    size = options["width"] / 3
    figure, axes = plt.subplots(1, len(tasks), figsize=(size * len(tasks), size), squeeze=False)
    for axis, task in zip(axes[0], tasks, strict=True):
        found = signatures[task]
        shown = np.array([0, len(found["anchors"]) - 1])
        _signature_panel(axis, found, task, KEY_SIGNATURE[task], shown_labels.of(task), shown)
        if axis.lines:  # none where no sample holds the label
            axis.legend(fontsize=6)
    inputs = str(next(iter(signatures.values()))["signature_inputs"])
    figure.suptitle(
        f"The signature that differs across anchors ({INPUT_LABELS[inputs]})", fontsize=9
    )
    finish_figure(figure, None, path, options)


def plot_signature_profiles(
    signatures: Mapping[str, Mapping[str, np.ndarray]],
    shown_labels: ShownLabels,
    *,
    path: str | os.PathLike[str],
    options: Mapping[str, Any],
) -> None:
    """Per task (rows): φ^y_α, φ^X_α and φ^{X|y}_α at y = ``shown_labels`` for every
    anchor α, and φ^X_ν for ``SHOWN_LABELS_OF_PROFILE`` labels ν spread over the label
    domain, against the token (Fig. 7)."""
    tasks = list(signatures)
    size = options["width"] / 4
    figure, axes = plt.subplots(
        len(tasks), 4, figsize=(options["width"], size * len(tasks)), squeeze=False
    )
    for row, task in enumerate(tasks):
        found = signatures[task]
        every = np.arange(len(found["anchors"]))
        for column, name in enumerate(SIGNATURE_LABELS):
            _signature_panel(axes[row][column], found, task, name, shown_labels.of(task), every)
        domain = found["label_domain"]
        picked = np.unique(np.linspace(0, len(domain) - 1, SHOWN_LABELS_OF_PROFILE).astype(int))
        _profile(
            axes[row][3],
            found["label_context"][picked],
            [f"ν = {label}" for label in domain[picked]],
            plt.get_cmap("plasma")(np.linspace(0.0, 0.8, len(picked))),
            None,
            f"{TASK_LABELS[task]}: φ^X_ν",
        )
        for axis in (axes[row][0], axes[row][3]):
            axis.legend(fontsize=5, ncol=2)
    inputs = str(next(iter(signatures.values()))["signature_inputs"])
    figure.suptitle(
        f"Probability signatures under distinct α and ν ({INPUT_LABELS[inputs]})", fontsize=9
    )
    finish_figure(figure, None, path, options)
