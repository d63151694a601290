"""Snakemake entry point: figures of the signature comparison of one model × corpus."""

import numpy as np
import polars as pl

from layerlaws.core.logs import run_logged
from layerlaws.signatures.plots import plot_deciles, plot_digits, plot_heatmaps, plot_per_token


def main() -> None:
    options, title, output = snakemake.params.plots, snakemake.params.title, snakemake.output
    with np.load(snakemake.input.views) as archive:
        views = dict(archive)
    plot_heatmaps(views, title, output.heatmaps, options)
    plot_digits(views, title, output.digits, options)
    plot_deciles(pl.read_csv(snakemake.input.percentiles), title, output.deciles, options)
    plot_per_token(pl.read_parquet(snakemake.input.per_token), title, output.per_token, options)


run_logged(main, snakemake.log[0])
