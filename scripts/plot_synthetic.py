"""Snakemake entry point: the synthetic addition stage's figures (results/synthetic/)."""

from layerlaws.core.logs import run_logged
from layerlaws.synthetic.plots import (
    plot_distinct_signatures,
    plot_dynamics,
    plot_embedding_heatmaps,
    plot_signature_profiles,
    plot_signatures,
    plot_unembedding,
    plot_unembedding_pca,
    plot_weight_pca,
)
from layerlaws.synthetic.settings import SyntheticPlotSettings
from layerlaws.synthetic.summary import read_results


def main() -> None:
    pairs, tasks, paths = snakemake.params.pairs, snakemake.params.tasks, snakemake.input
    records, weights, signatures = read_results(
        dict(zip(pairs, paths.records, strict=True)),
        dict(zip(pairs, paths.weights, strict=True)),
        dict(zip(tasks, paths.signatures, strict=True)),
    )
    shown = SyntheticPlotSettings.from_params(snakemake.params).shown_labels
    options, output = snakemake.params.plots, snakemake.output
    plot_dynamics(records, path=output.dynamics, options=options)
    plot_embedding_heatmaps(weights, path=output.embeddings, options=options)
    plot_signatures(signatures, weights, path=output.signatures, options=options)
    plot_unembedding(signatures, weights, path=output.unembedding, options=options)
    plot_distinct_signatures(signatures, shown, path=output.distinct_signatures, options=options)
    plot_signature_profiles(signatures, shown, path=output.signature_profiles, options=options)
    plot_unembedding_pca(signatures, weights, path=output.unembedding_pca, options=options)
    for name, model, weight in (
        ("embedding_pca", "linear", "anchor_embeddings"),
        ("ffn_unembedding_pca", "ffn", "label_unembeddings"),
    ):
        plot_weight_pca(weights, tasks, model, weight, path=getattr(output, name), options=options)


run_logged(main, snakemake.log[0], snakemake.resources)
