"""Figures of the block-coupling and trajectory stage (Aubry et al., Figs. 1, 3, 4, 10, 17,
23–25).

``options`` are the config's plot options (``format``, ``dpi``, ``width``). Every figure
sets the trained model beside its randomly initialised twin.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from typing import Any

import numpy as np
import polars as pl

from layerlaws.core.figures import finish_figure, plt, save_figure
from layerlaws.core.geometry import principal_plane

WEIGHTS = ("trained", "random")
DRAWN_METRIC = "paper"
"""The coupling metric the figures draw: Aubry et al.'s m̃ (Eq. 14)."""
GRID_BLOCKS = (9, 16)
"""First and last block (1-based) of the depth grid, Fig. 3's; a model of fewer than 16
blocks shows as many consecutive ones, ending at its last."""
GRID_TOKENS = 8
"""Tokens of the token grid: the prompt's last ones (Fig. 4)."""


def _paper_metric(table: pl.DataFrame) -> pl.DataFrame:
    """The rows of the drawn metric (tables written before the ``metric`` column hold only
    the paper's)."""
    if "metric" not in table.columns:
        return table
    return table.filter(pl.col("metric") == DRAWN_METRIC)


def _square(table: pl.DataFrame, row: str, column: str) -> np.ndarray:
    size = int(max(table[row].max(), table[column].max())) + 1
    offset = int(min(table[row].min(), table[column].min()))
    matrix = np.full((size - offset, size - offset), np.nan)
    matrix[table[row].to_numpy() - offset, table[column].to_numpy() - offset] = table[
        "miscoupling"
    ].to_numpy()
    return matrix


def plot_depth(
    depth: pl.DataFrame,
    *,
    path: str | os.PathLike[str],
    title: str,
    options: Mapping[str, Any],
) -> None:
    """Depth-wise mis-coupling M[l, l′] of the last token by the paper's metric, mean over
    prompts (Fig. 3)."""
    depth = _paper_metric(depth)
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
    finish_figure(
        figure, f"{title}: depth-wise mis-coupling, last token, K={k}", path, options, tight=False
    )


def plot_tokens(
    tokens: pl.DataFrame,
    *,
    path: str | os.PathLike[str],
    title: str,
    options: Mapping[str, Any],
) -> None:
    """Token-wise mis-coupling by the paper's metric at the first chosen layer pair, first
    prompt whose Jacobians are measured (Fig. 4)."""
    tokens = _paper_metric(tokens)
    k = tokens["k"].min()
    first = tokens.row(0, named=True)
    prompt, layer_a, layer_b = first["prompt"], first["layer_a"], first["layer_b"]
    kinds = tokens["kind"].unique(maintain_order=True).to_list()
    figure, axes = plt.subplots(
        2, len(kinds), figsize=(options["width"], options["width"] / 1.6), squeeze=False
    )
    for row, weights in enumerate(WEIGHTS):
        for column, kind in enumerate(kinds):
            block = tokens.filter(
                (pl.col("weights") == weights)
                & (pl.col("prompt") == prompt)
                & (pl.col("kind") == kind)
                & (pl.col("k") == k)
                & (pl.col("layer_a") == layer_a)
                & (pl.col("layer_b") == layer_b)
            )
            axis = axes[row][column]
            low, high = block["token_a"].min() - 0.5, block["token_a"].max() + 0.5
            axis.imshow(
                _square(block, "token_a", "token_b"),
                vmin=0,
                vmax=1,
                cmap="viridis_r",
                extent=(low, high, high, low),
            )
            axis.set_title(f"{weights}, {kind}", fontsize=8)
            axis.set_xlabel(f"token (singular vectors, layer {layer_b})", fontsize=7)
            axis.set_ylabel(f"token (Jacobian, layer {layer_a})", fontsize=7)
    layers = f"layer {layer_a}" if layer_a == layer_b else f"layers {layer_a} and {layer_b}"
    finish_figure(figure, f"{title}: token-wise mis-coupling, {layers}, K={k}", path, options)


def plot_adjacency(
    depth: pl.DataFrame,
    *,
    path: str | os.PathLike[str],
    title: str,
    options: Mapping[str, Any],
) -> None:
    """Mean mis-coupling (the paper's metric) against layer distance |l − l′| (Fig. 1c–e):
    coupling is expected to be strongest between adjacent layers of a trained model."""
    figure, axis = plt.subplots(figsize=(options["width"] / 2, 3.5))
    distances = (
        _paper_metric(depth)
        .filter(pl.col("prompt") == "mean")
        .with_columns(distance=(pl.col("layer_a") - pl.col("layer_b")).abs())
        .filter(pl.col("distance") > 0)
        .group_by("weights", "k", "distance")
        .agg(pl.col("miscoupling").mean())
        .sort("weights", "k", "distance")
    )
    for (weights, k), block in distances.group_by(["weights", "k"], maintain_order=True):
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


def _mosaic(couplings: np.ndarray) -> np.ndarray:
    """The (n, n, K, K) coupling matrices as one image: tile (a, b) is |A[a, b]| over its
    own largest entry (so each tile shows its own pattern, whatever J's scale), tiles
    apart by one blank (NaN) row and column; shape (n(K + 1) − 1, n(K + 1) − 1)."""
    n, _, k, _ = couplings.shape
    absolute = np.abs(couplings.astype(np.float64))
    peaks = absolute.max(axis=(2, 3), keepdims=True)
    tiles = np.divide(absolute, peaks, out=np.zeros_like(absolute), where=peaks > 0)
    padded = np.full((n, n, k + 1, k + 1), np.nan)
    padded[:, :, :k, :k] = tiles
    return padded.transpose(0, 2, 1, 3).reshape(n * (k + 1), n * (k + 1))[:-1, :-1]


def _draw_grid(
    figure: Any, axes: Any, grids: Mapping[str, np.ndarray], labels: np.ndarray, names: str
) -> None:
    """One mosaic of |A| per weights, random on top and trained below (Figs. 3–4); tiles
    labelled by ``labels`` (the layer or token of each row and column)."""
    k = next(iter(grids.values())).shape[-1]
    centres = np.arange(len(labels)) * (k + 1) + (k - 1) / 2
    for axis, weights in zip(axes, ("random", "trained"), strict=True):
        image = axis.imshow(_mosaic(grids[weights]), vmin=0, vmax=1, cmap="viridis")
        axis.set_xticks(centres, labels, fontsize=7)
        axis.set_yticks(centres, labels, fontsize=7)
        axis.set_title(weights, fontsize=9)
        axis.set_xlabel(f"{names} of the singular vectors (U′, V′)", fontsize=8)
        axis.set_ylabel(f"{names} of the Jacobian J", fontsize=8)
        figure.colorbar(image, ax=axis, shrink=0.8, label="|A| / max |A| of the tile")


def first_coupled_prompt(couplings: Mapping[str, np.ndarray]) -> int:
    """The first prompt whose coupling matrices ``couplings`` (couplings.npz) holds: the
    first whose Jacobians are measured (``coupling.prompts.<set>.jacobian_draw``)."""
    prefix = "depth/trained/"
    return min(
        int(key.removeprefix(prefix))
        for key in couplings
        if key.startswith(prefix) and key.removeprefix(prefix).isdigit()
    )


def depth_grid_blocks(num_layers: int) -> range:
    """The blocks (1-based) of the depth grid of a model of ``num_layers`` blocks: those of
    ``GRID_BLOCKS``, or as many ending at its last block where it has fewer."""
    first_block, last_block = GRID_BLOCKS
    last = min(last_block, num_layers)
    return range(max(last - (last_block - first_block), 1), last + 1)


def plot_depth_grid(
    couplings: Mapping[str, np.ndarray],
    *,
    path: str | os.PathLike[str],
    title: str,
    options: Mapping[str, Any],
) -> None:
    """|A_{ll′}| = |U′_{l′}ᵀ J^l V′_{l′}| of the last token of the first prompt with
    Jacobians (``first_coupled_prompt``) for the blocks of ``GRID_BLOCKS`` (9–16, Aubry et
    al.'s Fig. 3), laid out l × l′, random twin on top and trained model below;
    ``couplings`` is couplings.npz."""
    prompt = first_coupled_prompt(couplings)
    blocks = depth_grid_blocks(couplings[f"depth/trained/{prompt}"].shape[0])
    rows = slice(blocks.start - 1, blocks.stop - 1)
    grids = {w: couplings[f"depth/{w}/{prompt}"][rows, rows] for w in WEIGHTS}
    figure, axes = plt.subplots(2, 1, figsize=(options["width"] / 2, options["width"] * 0.9))
    _draw_grid(figure, axes, grids, np.array(blocks), "block")
    k = int(couplings["k"])
    finish_figure(
        figure, f"{title}: coupling across depth, last token, K={k}", path, options, tight=False
    )


def plot_token_grid(
    couplings: Mapping[str, np.ndarray],
    *,
    path: str | os.PathLike[str],
    title: str,
    options: Mapping[str, Any],
) -> None:
    """|A^{tt t′t′}_{ll′}|: the self-Jacobians J^l_{tt} of the first prompt with Jacobians
    (``first_coupled_prompt``) coupled with the singular vectors of J^{l′}_{t′t′}, for its
    last ``GRID_TOKENS`` tokens at the first token layer pair, random twin on top and
    trained model below (Aubry et al., Fig. 4)."""
    prompt = first_coupled_prompt(couplings)
    length = couplings[f"tokens/trained/{prompt}"].shape[0]
    first = max(length - GRID_TOKENS, 0)
    grids = {w: couplings[f"tokens/{w}/{prompt}"][first:, first:] for w in WEIGHTS}
    figure, axes = plt.subplots(2, 1, figsize=(options["width"] / 2, options["width"] * 0.9))
    _draw_grid(figure, axes, grids, np.arange(first, length), "token")
    layer_a, layer_b = (int(layer) for layer in couplings["token_layers"])
    layers = f"layer {layer_a}" if layer_a == layer_b else f"layers {layer_a}, {layer_b}"
    k = int(couplings["k"])
    finish_figure(
        figure, f"{title}: coupling across tokens, {layers}, K={k}", path, options, tight=False
    )


def pair_coupling(depth: pl.DataFrame) -> pl.DataFrame:
    """Per weights, the depth-wise normalised coupling of each layer pair l < l′ (Aubry et
    al., Fig. 1c–e): coupling 1 − m̃ (the paper's metric, smallest K, mean over prompts)
    averaged over the two directions (l, l′) and (l′, l), then scaled to 0..1 over the
    pairs of that weights (min to max). Columns weights, low, high, coupling, weight."""
    depth = _paper_metric(depth)
    return (
        depth.filter((pl.col("prompt") == "mean") & (pl.col("k") == depth["k"].min()))
        .filter(pl.col("layer_a") != pl.col("layer_b"))
        .with_columns(
            low=pl.min_horizontal("layer_a", "layer_b"),
            high=pl.max_horizontal("layer_a", "layer_b"),
        )
        .group_by("weights", "low", "high")
        .agg(coupling=1 - pl.col("miscoupling").mean())
        .with_columns(
            weight=(
                (pl.col("coupling") - pl.col("coupling").min())
                / (pl.col("coupling").max() - pl.col("coupling").min())
            ).over("weights")
        )
        .sort("weights", "low", "high")
    )


def plot_adjacency_graph(
    depth: pl.DataFrame,
    *,
    path: str | os.PathLike[str],
    title: str,
    options: Mapping[str, Any],
) -> None:
    """The adjacency graph of Aubry et al., Fig. 1c–e: the layers as nodes on a circle,
    an edge between every pair whose width and opacity are its depth-wise normalised
    coupling (``pair_coupling``)."""
    pairs = pair_coupling(depth)
    num_layers = int(pairs["high"].max())
    angles = np.pi / 2 - 2 * np.pi * np.arange(num_layers) / num_layers
    nodes = np.column_stack([np.cos(angles), np.sin(angles)])
    figure, axes = plt.subplots(1, 2, figsize=(options["width"], options["width"] / 2))
    for axis, weights in zip(axes, WEIGHTS, strict=True):
        for row in pairs.filter(pl.col("weights") == weights).iter_rows(named=True):
            ends = nodes[[row["low"] - 1, row["high"] - 1]]
            weight = float(np.nan_to_num(row["weight"]))
            axis.plot(*ends.T, color="tab:blue", linewidth=0.2 + 3 * weight, alpha=weight)
        axis.scatter(*nodes.T, s=60, color="black", zorder=3)
        for layer, (x, y) in enumerate(nodes, start=1):
            axis.annotate(str(layer), (1.12 * x, 1.12 * y), ha="center", va="center", fontsize=7)
        axis.set(xlim=(-1.3, 1.3), ylim=(-1.3, 1.3), aspect="equal")
        axis.axis("off")
        axis.set_title(weights, fontsize=9)
    k = _paper_metric(depth)["k"].min()
    finish_figure(
        figure, f"{title}: normalised coupling between layers, K={k}", path, options, tight=False
    )


def plot_shape(
    trajectories: pl.DataFrame,
    *,
    path: str | os.PathLike[str],
    title: str,
    options: Mapping[str, Any],
) -> None:
    """Distributions over all tokens of the line-shape score, the expodistance and the
    equidistance's coefficient of variation (Fig. 23), with their means (the paper quotes
    the mean LSS) and medians in the legend."""
    columns = ("lss", "expodistance", "equidistance_cv")
    figure, axes = plt.subplots(1, len(columns), figsize=(options["width"], 3.2))
    for axis, column in zip(axes, columns, strict=True):
        for weights in WEIGHTS:
            values = trajectories.filter(pl.col("weights") == weights)[column].to_numpy()
            axis.hist(
                values[np.isfinite(values)],
                bins=20,
                alpha=0.6,
                label=(
                    f"{weights} (mean {np.nanmean(values):.2f}, median {np.nanmedian(values):.2f})"
                ),
            )
        axis.set_xlabel(
            {
                "lss": "line-shape score (1 = straight)",
                "expodistance": "expodistance (0 = exponential growth)",
                "equidistance_cv": "CV of ‖x^l − x^(l−1)‖ (0 = equidistant)",
            }[column],
            fontsize=8,
        )
        axis.legend(fontsize=7)
    finish_figure(figure, title, path, options)


def plot_pca(
    streams: Mapping[str, np.ndarray],
    *,
    path: str | os.PathLike[str],
    title: str,
    options: Mapping[str, Any],
) -> None:
    """Token trajectories of the first prompt on the top two principal components of their
    last layer (Fig. 17 style, Appendix A.2.1); darker points are deeper layers, the last
    token's line is black and the first token's orange (in trained models it often carries
    massive activations, an attention sink, and lies far from the others)."""
    figure, axes = plt.subplots(1, 2, figsize=(options["width"], options["width"] / 2.2))
    for axis, weights in zip(axes, WEIGHTS, strict=True):
        stream = streams[f"{weights}/0"]  # (L + 1, T, d)
        trajectories = np.transpose(stream, (1, 0, 2))  # (T, L + 1, d)
        projected = principal_plane(trajectories, fitted_on=trajectories[:, -1])
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
    finish_figure(
        figure, f"{title}: trajectories of the first prompt's tokens", path, options, tight=False
    )


def _median_band(axis: Any, table: pl.DataFrame, x: str, y: str, style: str, label: str) -> None:
    """Median of ``y`` against ``x`` with its inter-quartile band."""
    stats = (
        table.filter(pl.col(y).is_not_nan())
        .group_by(x)
        .agg(
            median=pl.col(y).median(),
            low=pl.col(y).quantile(0.25),
            high=pl.col(y).quantile(0.75),
        )
        .sort(x)
    )
    lines = axis.plot(stats[x], stats["median"], style, markersize=3, label=label)
    axis.fill_between(stats[x], stats["low"], stats["high"], alpha=0.2, color=lines[0].get_color())


def plot_singular_values(
    singular_values: pl.DataFrame,
    *,
    path: str | os.PathLike[str],
    title: str,
    options: Mapping[str, Any],
) -> None:
    """Top singular values of the last token's block Jacobians against depth, median over
    prompts with the inter-quartile band, for ranks 1, 2, 5, 10 (Aubry et al., Appendix:
    singular value scaling)."""
    ranks = [rank for rank in (1, 2, 5, 10) if rank <= singular_values["rank"].max()]
    figure, axes = plt.subplots(
        1, 2, figsize=(options["width"], options["width"] / 2.6), sharey=True
    )
    for axis, weights in zip(axes, WEIGHTS, strict=True):
        for rank in ranks:
            block = singular_values.filter(
                (pl.col("weights") == weights) & (pl.col("rank") == rank)
            )
            _median_band(axis, block, "layer", "singular_value", "o-", f"σ_{rank}")
        axis.set_yscale("log")
        axis.set_title(weights, fontsize=9)
        axis.set_xlabel("layer l")
        axis.legend(fontsize=7)
    axes[0].set_ylabel("singular value of J^l (last token)")
    finish_figure(figure, f"{title}: singular values against depth", path, options, tight=False)


def plot_layers(
    layers: pl.DataFrame,
    *,
    path: str | os.PathLike[str],
    title: str,
    options: Mapping[str, Any],
) -> None:
    """Per-layer profiles over all tokens and prompts (Aubry et al., Fig. 24–25): the norm of
    x^l, the step length ‖x^l − x^{l−1}‖, the line-shape score of the centred window, and
    by the logit lens the entropy of the model's own prediction from x^l and its loss on
    the next token (Fig. 24, row 4); median with the inter-quartile band, trained against
    random weights."""
    panels = {
        "norm": ("‖x^l‖", "log"),
        "step_length": ("‖x^l − x^(l−1)‖", "log"),
        "lss_window": ("windowed line-shape score", "linear"),
        "logit_entropy": ("entropy of the logit lens (nats)", "linear"),
        "next_token_loss": ("next-token loss of the logit lens (nats)", "linear"),
    }
    figure, axes = plt.subplots(1, len(panels), figsize=(options["width"] * 1.4, 3.2))
    for axis, (column, (label, scale)) in zip(axes, panels.items(), strict=True):
        for weights in WEIGHTS:
            block = layers.filter(pl.col("weights") == weights)
            _median_band(
                axis, block, "layer", column, "o-" if weights == "trained" else "x--", weights
            )
        axis.set_yscale(scale)
        axis.set_xlabel("layer l")
        axis.set_ylabel(label, fontsize=8)
        axis.legend(fontsize=7)
    finish_figure(figure, f"{title}: trajectories against depth", path, options)


def plot_prompt_length(
    panel: pl.DataFrame,
    *,
    path: str | os.PathLike[str],
    title: str,
    options: Mapping[str, Any],
) -> None:
    """The coupling of each prompt with Jacobians against its length in tokens, a colour
    per dataset, trained beside random weights, with Pearson r over the prompts (Aubry et
    al., Fig. 10, right). ``panel``: ``layerlaws.coupling.per_prompt.length_panel``'s
    points (−m of Eq. 13 averaged over all layer pairs, §5.4, at the smallest K)."""
    symbol = "m" if panel["metric"][0] == "unnormalised" else "m̃"
    figure, axes = plt.subplots(1, 2, figsize=(options["width"], options["width"] / 2.4))
    for axis, weights in zip(axes, WEIGHTS, strict=True):
        block = panel.filter(pl.col("weights") == weights)
        for (dataset,), part in block.group_by("dataset", maintain_order=True):
            label = dataset or "the set's own texts"
            axis.plot(part["tokens"], part["coupling"], "o", markersize=3, label=label)
        varies = all(block[column].n_unique() > 1 for column in ("tokens", "coupling"))
        r = np.corrcoef(block["tokens"], block["coupling"])[0, 1] if varies else None
        axis.set_title(weights + ("" if r is None else f", r = {r:.2f}"), fontsize=9)
        axis.set_xlabel("prompt length (tokens)")
        axis.set_ylabel(f"coupling −{symbol}, mean over layer pairs")
        axis.legend(fontsize=6)
    k = panel["k"][0]
    finish_figure(
        figure, f"{title}: coupling against prompt length, K={k}", path, options, tight=False
    )
