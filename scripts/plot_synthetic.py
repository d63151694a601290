"""Snakemake entry point: the synthetic addition stage's figures (results/synthetic/)."""

from layerlaws.core.logs import run_logged
from layerlaws.synthetic.plots import (
    plot_dynamics,
    plot_embedding_heatmaps,
    plot_signatures,
    plot_unembedding,
)
from layerlaws.synthetic.summary import read_results


def main() -> None:
    pairs, tasks, paths = snakemake.params.pairs, snakemake.params.tasks, snakemake.input
    records, weights, signatures = read_results(
        dict(zip(pairs, paths.records, strict=True)),
        dict(zip(pairs, paths.weights, strict=True)),
        dict(zip(tasks, paths.signatures, strict=True)),
    )
    options, output = snakemake.params.plots, snakemake.output
    plot_dynamics(records, path=output.dynamics, options=options)
    plot_embedding_heatmaps(weights, path=output.embeddings, options=options)
    plot_signatures(signatures, weights, path=output.signatures, options=options)
    plot_unembedding(signatures, weights, path=output.unembedding, options=options)


run_logged(main, snakemake.log[0])
