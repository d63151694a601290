"""Snakemake entry point: one table of all law fits (results/equilearning/summary.csv)."""

import polars as pl

from layerlaws.atomic import write_csv
from layerlaws.logs import run_logged


def main() -> None:
    tables = [
        pl.read_csv(path).select(
            pl.lit(model).alias("model"), pl.lit(dataset).alias("dataset"), pl.all()
        )
        for (model, dataset), path in zip(snakemake.params.runs, snakemake.input.law, strict=True)
    ]
    write_csv(snakemake.output[0], pl.concat(tables))


run_logged(main, snakemake.log[0])
