"""Snakemake entry point: coupling and trajectory figures of one model × prompt set."""

import numpy as np
import polars as pl

from layerlaws.core.logs import run_logged
from layerlaws.coupling.plots import (
    plot_adjacency,
    plot_adjacency_graph,
    plot_depth,
    plot_depth_grid,
    plot_layers,
    plot_pca,
    plot_shape,
    plot_singular_values,
    plot_token_grid,
    plot_tokens,
)


def main() -> None:
    options, title, output = snakemake.params.plots, snakemake.params.title, snakemake.output
    depth = pl.read_csv(snakemake.input.depth, schema_overrides={"prompt": pl.String})
    tokens = pl.read_csv(snakemake.input.tokens, schema_overrides={"prompt": pl.String})
    trajectories = pl.read_csv(snakemake.input.trajectories, schema_overrides={"prompt": pl.String})
    plot_depth(depth, path=output.depth, title=title, options=options)
    plot_tokens(tokens, path=output.tokens, title=title, options=options)
    plot_adjacency(depth, path=output.adjacency, title=title, options=options)
    plot_adjacency_graph(depth, path=output.adjacency_graph, title=title, options=options)
    # The archives are read lazily, the arrays a figure draws only (the first prompt's):
    # a paper-sized set holds hundreds of GB of streams.
    with np.load(snakemake.input.couplings) as couplings:
        plot_depth_grid(couplings, path=output.depth_grid, title=title, options=options)
        plot_token_grid(couplings, path=output.token_grid, title=title, options=options)
    plot_shape(trajectories, path=output.shape, title=title, options=options)
    singular_values = pl.read_csv(
        snakemake.input.singular_values, schema_overrides={"prompt": pl.String}
    )
    plot_singular_values(singular_values, path=output.singular_values, title=title, options=options)
    layers = pl.read_csv(snakemake.input.layers, schema_overrides={"prompt": pl.String})
    plot_layers(layers, path=output.layers, title=title, options=options)
    with np.load(snakemake.input.streams) as streams:
        plot_pca(streams, path=output.pca, title=title, options=options)


run_logged(main, snakemake.log[0], snakemake.resources)
