"""Snakemake entry point: the synthetic addition stage's figures (results/synthetic/)."""

from layerlaws.addition_plots import (
    plot_dynamics,
    plot_embedding_heatmaps,
    plot_signatures,
    plot_unembedding,
)
from layerlaws.addition_summary import read_results
from layerlaws.logs import run_logged


def main() -> None:
    pairs, tasks, paths = snakemake.params.pairs, snakemake.params.tasks, snakemake.input
    records, weights, signatures = read_results(
        dict(zip(pairs, paths.records, strict=True)),
        dict(zip(pairs, paths.weights, strict=True)),
        dict(zip(tasks, paths.signatures, strict=True)),
    )
    options, output = snakemake.params.plots, snakemake.output
    plot_dynamics(records, output.dynamics, options)
    plot_embedding_heatmaps(weights, output.embeddings, options)
    plot_signatures(signatures, weights, output.signatures, options)
    plot_unembedding(signatures, weights, output.unembedding, options)


run_logged(main, snakemake.log[0])
