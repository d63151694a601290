"""Snakemake entry point: next-token PR of every model × dataset in one figure."""

import polars as pl

from layerlaws.core.logs import run_logged
from layerlaws.equilearning.plots import plot_summary


def main() -> None:
    tables = {
        (model, dataset): pl.read_csv(path)
        for (model, dataset), path in zip(snakemake.params.runs, snakemake.input.pr, strict=True)
    }
    summary = pl.read_csv(snakemake.input.summary)
    plot_summary(tables, summary, path=snakemake.output[0], options=snakemake.params.plots)


run_logged(main, snakemake.log[0], snakemake.resources)
