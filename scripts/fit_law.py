"""Snakemake entry point: fit the law of equi-learning (results/equilearning/…/law.csv)."""

import polars as pl

from layerlaws.atomic import write_csv
from layerlaws.law import law_table
from layerlaws.logs import run_logged


def main() -> None:
    write_csv(snakemake.output[0], law_table(pl.read_csv(snakemake.input[0])))


run_logged(main, snakemake.log[0])
