"""Snakemake entry point: one table of all law fits and each model's datasets ranked by
the strength of its law (results/equilearning/summary.csv, best_datasets.csv)."""

import polars as pl

from layerlaws.core.atomic import write_csv
from layerlaws.core.logs import run_logged
from layerlaws.equilearning.law import best_datasets


def main() -> None:
    tables = [
        pl.read_csv(path).select(
            pl.lit(model).alias("model"), pl.lit(dataset).alias("dataset"), pl.all()
        )
        for (model, dataset), path in zip(snakemake.params.runs, snakemake.input.law, strict=True)
    ]
    summary = pl.concat(tables)
    write_csv(snakemake.output.summary, summary)
    write_csv(snakemake.output.best, best_datasets(summary))


run_logged(main, snakemake.log[0], snakemake.resources)
