"""Figures of the probability-signature stage (Yao & Xu, Figs. 5A–E and 6B).

``options`` are the config's plot options: ``format``, ``dpi`` and ``width`` of every
figure, and this stage's own ``heatmap_tokens`` (``plots.signatures``).
"""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
import polars as pl

from layerlaws.core.figures import finish_figure, plt, save_figure

HEATMAPS = (
    ("W_E", "cos(W_E)"),
    ("W_U", "cos(W_U)"),
    ("next", "cos(φ_next)"),
    ("pre", "cos(φ_pre)"),
    ("tilde", "cos(φ̃) = cos(φ_next + φ_pre)"),
)


def _heatmap(
    figure: Any,
    axis: Any,
    matrix: np.ndarray,
    labels: Sequence[str],
    caption: str,
    fontsize: float = 5,
) -> None:
    """One cosine-similarity heatmap in [−1, 1], token labels on both axes (up to 50, in
    ``fontsize`` points), NaN entries grey (a token without that vector)."""
    colours = plt.get_cmap("RdBu_r").with_extremes(bad="0.8")
    image = axis.imshow(matrix, cmap=colours, vmin=-1, vmax=1, interpolation="nearest")
    axis.set_title(caption, fontsize=9)
    if 0 < len(labels) <= 50:
        ticks = np.arange(len(labels))
        axis.set_xticks(ticks, labels, rotation=90, fontsize=fontsize)
        axis.set_yticks(ticks, labels, fontsize=fontsize)
    else:
        axis.set_xticks([])
        axis.set_yticks([])
    figure.colorbar(image, ax=axis, shrink=0.7)


def _heatmap_grid(
    views: Mapping[str, np.ndarray],
    prefix: str,
    labels: np.ndarray,
    title: str,
    path: str | os.PathLike[str],
    options: Mapping[str, Any],
) -> None:
    figure, axes = plt.subplots(2, 3, figsize=(options["width"], options["width"] * 2 / 3))
    axes[1][2].axis("off")
    for axis, (name, caption) in zip(axes.ravel(), HEATMAPS, strict=False):
        _heatmap(figure, axis, views[f"{prefix}_{name}"], labels, caption)
    finish_figure(figure, title, path, options, tight=False)


def plot_heatmaps(
    views: Mapping[str, np.ndarray],
    *,
    path: str | os.PathLike[str],
    title: str,
    options: Mapping[str, Any],
) -> None:
    """Similarity heatmaps of the most frequent tokens (paper Fig. 5A)."""
    count = min(options["heatmap_tokens"], len(views["top_labels"]))
    shown = {
        key: value[:count, :count]
        for key, value in views.items()
        if key.startswith("top_") and key != "top_labels"
    }
    _heatmap_grid(
        shown,
        "top",
        views["top_labels"][:count],
        f"{title}: {count} most frequent tokens",
        path,
        options,
    )


def plot_digits(
    views: Mapping[str, np.ndarray],
    *,
    path: str | os.PathLike[str],
    title: str,
    options: Mapping[str, Any],
) -> None:
    """Similarity heatmaps of the number tokens 0–99 present in the analysis (Fig. 6B)."""
    _heatmap_grid(
        views,
        "digits",
        views["digit_labels"],
        f"{title}: number tokens ({len(views['digit_labels'])})",
        path,
        options,
    )


GROUP_HEATMAPS = ("W_E", "next")
"""The similarity matrices drawn for a chosen token group (Yao & Xu Fig. 12)."""


def plot_token_group(
    cosines: pl.DataFrame,
    *,
    path: str | os.PathLike[str],
    title: str,
    options: Mapping[str, Any],
) -> None:
    """cos(W_E) beside cos(φ_next) over a chosen group of tokens (Yao & Xu Fig. 12, first
    row), the tokens in the group's order; a token without a next token in the corpus
    has a grey (NaN) row and column in cos(φ_next). ``cosines``: the long-form table of
    ``token_groups.group_cosines``."""
    figure, axes = plt.subplots(1, 2, figsize=(options["width"], options["width"] * 0.45))
    captions = dict(HEATMAPS)
    for axis, name in zip(axes, GROUP_HEATMAPS, strict=True):
        block = cosines.filter(pl.col("matrix") == name)
        labels = block["row_text"].unique(maintain_order=True).to_list()
        matrix = block["cosine"].to_numpy().reshape(len(labels), len(labels))
        _heatmap(figure, axis, matrix, labels, captions[name], fontsize=8)
    finish_figure(figure, title, path, options, tight=False)


def plot_deciles(
    deciles: pl.DataFrame,
    *,
    path: str | os.PathLike[str],
    title: str,
    options: Mapping[str, Any],
) -> None:
    """Signature-similarity percentile in each decile of the embedding-similarity percentile,
    mean with interquartile band (Fig. 5D–E; pooled over corpora, Fig. 11)."""
    figure, axis = plt.subplots(figsize=(options["width"] / 2, 3.5))
    for (matrix, signature), block in deciles.sort("decile").group_by(
        ["matrix", "signature"], maintain_order=True
    ):
        line = axis.plot(
            block["decile"], block["mean"], "o-", markersize=3, label=f"{matrix} vs φ_{signature}"
        )
        if "q25" in block.columns:
            axis.fill_between(
                block["decile"], block["q25"], block["q75"], alpha=0.15, color=line[0].get_color()
            )
    axis.axhline(50, color="0.6", linewidth=0.8, linestyle=":")
    axis.set_xlabel("decile of embedding-similarity percentile")
    axis.set_ylabel("signature-similarity percentile")
    axis.set_title(title, fontsize=10)
    axis.legend(fontsize=7)
    save_figure(figure, path, options)


HISTOGRAM_PAIRS = (("W_E", "next"), ("W_U", "pre"))
"""The embedding–signature pairs whose per-decile histograms are drawn (Yao & Xu's two)."""


def plot_decile_histograms(
    bins: pl.DataFrame,
    *,
    path: str | os.PathLike[str],
    title: str,
    options: Mapping[str, Any],
) -> None:
    """The distribution of the signature-similarity percentile in each decile of the
    embedding-similarity percentile (Yao & Xu Fig. 11; Fig. 5D shows three of them): a row
    per pair of ``HISTOGRAM_PAIRS``, a column per decile, each histogram the share of the
    decile's pairs in each percentile bin. ``bins``: matrix, signature, decile, bin
    (0–99), n_pairs (``pooled_bins``)."""
    figure, axes = plt.subplots(
        len(HISTOGRAM_PAIRS), 10, figsize=(options["width"], 3.2), sharex=True, sharey="row"
    )
    for row, (matrix, signature) in enumerate(HISTOGRAM_PAIRS):
        chosen = bins.filter((pl.col("matrix") == matrix) & (pl.col("signature") == signature))
        for decile in range(1, 11):
            axis = axes[row][decile - 1]
            block = chosen.filter(pl.col("decile") == decile)
            shares = np.zeros(100)
            shares[block["bin"].to_numpy()] = block["n_pairs"].to_numpy()
            axis.stairs(shares / max(shares.sum(), 1), np.arange(101), fill=True, alpha=0.7)
            axis.tick_params(labelsize=6)
            if row == 0:
                axis.set_title(f"{10 * (decile - 1)}–{10 * decile}%", fontsize=7)
        axes[row][0].set_ylabel(f"{matrix} vs φ_{signature}", fontsize=7)
    figure.supxlabel(
        "signature-similarity percentile, per decile of embedding similarity", fontsize=8
    )
    finish_figure(figure, title, path, options)


def plot_per_token(
    per_token: pl.DataFrame,
    *,
    path: str | os.PathLike[str],
    title: str,
    options: Mapping[str, Any],
) -> None:
    """Per token: agreement of its similarity rows against its mean embedding similarity
    (Fig. 5C), one panel per compared pair."""
    pairs = per_token.select("matrix", "signature").unique(maintain_order=True).rows()
    figure, axes = plt.subplots(
        1, len(pairs), figsize=(options["width"], 3.2), squeeze=False, sharey=True
    )
    for axis, (matrix, signature) in zip(axes[0], pairs, strict=True):
        block = per_token.filter((pl.col("matrix") == matrix) & (pl.col("signature") == signature))
        axis.scatter(block["mean_similarity"], block["correlation"], s=2, alpha=0.3)
        axis.set_title(f"{matrix} vs φ_{signature}", fontsize=9)
        axis.set_xlabel("mean embedding similarity")
    axes[0][0].set_ylabel("row correlation")
    finish_figure(figure, title, path, options)


def plot_rcos_by_corpus(
    rcos: pl.DataFrame,
    *,
    path: str | os.PathLike[str],
    title: str,
    options: Mapping[str, Any],
) -> None:
    """R_cos(W_E, φ_next) (top) and R_cos(W_U, φ_pre) (bottom) on each corpus (Fig. 5B),
    with R_cos against φ̃ as open markers."""
    corpora = rcos["corpus"].unique(maintain_order=True).to_list()
    figure, axes = plt.subplots(
        2, 1, figsize=(options["width"] / 2, 2 + 0.25 * len(corpora)), sharex=True
    )
    for axis, (matrix, signature) in zip(axes, (("W_E", "next"), ("W_U", "pre")), strict=True):
        for name, fill in ((signature, "full"), ("tilde", "none")):
            block = rcos.filter((pl.col("matrix") == matrix) & (pl.col("signature") == name))
            axis.plot(
                block["corpus"],
                block["r_cos"],
                "o",
                fillstyle=fill,
                label=f"R_cos({matrix}, φ_{name})",
            )
        axis.axhline(0, color="0.6", linewidth=0.8, linestyle=":")
        axis.legend(fontsize=7)
    axes[1].set_xticks(range(len(corpora)), corpora, rotation=30, ha="right", fontsize=8)
    finish_figure(figure, f"{title}: R_cos on each corpus", path, options)


def plot_per_token_by_corpus(
    per_token: pl.DataFrame,
    *,
    path: str | os.PathLike[str],
    title: str,
    options: Mapping[str, Any],
) -> None:
    """Per-token agreement of W_E with φ_next against mean embedding similarity, the
    tokens of every corpus pooled and coloured by corpus (Fig. 5C)."""
    figure, axis = plt.subplots(figsize=(options["width"] / 2, 3.5))
    block = per_token.filter((pl.col("matrix") == "W_E") & (pl.col("signature") == "next"))
    for (corpus,), points in block.group_by("corpus", maintain_order=True):
        axis.scatter(points["mean_similarity"], points["correlation"], s=2, alpha=0.3, label=corpus)
    axis.set_xlabel("mean similarity of the token's cos(W_E) row")
    axis.set_ylabel("Corr(cos(W_E) row, cos(φ_next) row)")
    axis.set_title(f"{title}: tokens of every corpus", fontsize=10)
    axis.legend(fontsize=7, markerscale=4)
    save_figure(figure, path, options)
