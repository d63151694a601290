"""Snakemake entry point: the heatmaps of a chosen group of tokens in one signature run
(Yao & Xu Fig. 12)."""

import polars as pl

from layerlaws.core.logs import run_logged
from layerlaws.signatures.plots import plot_token_group
from layerlaws.signatures.token_groups import COSINE_SCHEMA


def main() -> None:
    params = snakemake.params
    plot_token_group(
        pl.read_csv(snakemake.input.cosines, schema=COSINE_SCHEMA),
        path=snakemake.output.heatmaps,
        title=params.title,
        options=params.plots,
    )


run_logged(main, snakemake.log[0], snakemake.resources)
