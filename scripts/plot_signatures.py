"""Snakemake entry point: figures of the signature comparison of one model × corpus."""

import numpy as np
import polars as pl

from layerlaws.core.logs import run_logged
from layerlaws.signatures.plots import plot_deciles, plot_digits, plot_heatmaps, plot_per_token


def main() -> None:
    options, title, output = snakemake.params.plots, snakemake.params.title, snakemake.output
    with np.load(snakemake.input.views) as archive:
        views = dict(archive)
    plot_heatmaps(views, path=output.heatmaps, title=title, options=options)
    plot_digits(views, path=output.digits, title=title, options=options)
    deciles = pl.read_csv(snakemake.input.percentiles)
    plot_deciles(deciles, path=output.deciles, title=title, options=options)
    per_token = pl.read_parquet(snakemake.input.per_token)
    plot_per_token(per_token, path=output.per_token, title=title, options=options)


run_logged(main, snakemake.log[0], snakemake.resources)
