"""Snakemake entry point: a ``signatures.own_corpus`` group, each trained model against its
own training corpus (Yao & Xu Fig. 5B–E, 11): R_cos per dataset as a table and a figure,
the per-token view with every dataset's tokens pooled, and the decile profile pooled over
the datasets (mean and quartiles, and the histogram of each decile)."""

import polars as pl

from layerlaws.core.atomic import write_csv
from layerlaws.core.logs import run_logged
from layerlaws.signatures.comparison import by_run, pooled_bins, pooled_deciles
from layerlaws.signatures.plots import (
    plot_decile_histograms,
    plot_deciles,
    plot_per_token_by_corpus,
    plot_rcos_by_corpus,
)


def main() -> None:
    params, output, runs = snakemake.params, snakemake.output, snakemake.params.runs
    rcos = by_run([pl.read_csv(path) for path in snakemake.input.rcos], runs)
    per_token = by_run([pl.read_parquet(path) for path in snakemake.input.per_token], runs)
    bins = pooled_bins(
        by_run([pl.read_csv(path) for path in snakemake.input.percentile_bins], runs)
    )
    deciles = pooled_deciles(
        by_run([pl.read_csv(path) for path in snakemake.input.percentiles], runs), bins
    )
    write_csv(output.rcos, rcos)
    write_csv(output.deciles, deciles)
    write_csv(output.bins, bins)
    title, options = params.title, params.plots
    plot_rcos_by_corpus(rcos, path=output.rcos_by_dataset_figure, title=title, options=options)
    plot_per_token_by_corpus(
        per_token, path=output.per_token_by_dataset_figure, title=title, options=options
    )
    plot_deciles(
        deciles,
        path=output.pooled_deciles_figure,
        title=f"{title}: datasets pooled",
        options=options,
    )
    plot_decile_histograms(
        bins,
        path=output.pooled_histograms_figure,
        title=f"{title}: datasets pooled",
        options=options,
    )


run_logged(main, snakemake.log[0], snakemake.resources)
