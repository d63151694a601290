"""Snakemake entry point: a series' figures (results/series/{series}/*.{format})."""

import polars as pl

from layerlaws.core.logs import run_logged
from layerlaws.series.plots import (
    plot_generalisation,
    plot_members,
    plot_quantities,
    plot_score_fits,
)
from layerlaws.series.summary import FITS_SCHEMA


def main() -> None:
    params, output = snakemake.params, snakemake.output
    summary = pl.read_csv(snakemake.input.summary, infer_schema_length=None)
    fits = pl.read_csv(snakemake.input.fits, schema=FITS_SCHEMA)
    plot_quantities(
        summary, params.x, path=output.quantities, title=params.title, options=params.plots
    )
    plot_members(summary, path=output.members, title=params.title, options=params.plots)
    for draw, figure in (
        (plot_generalisation, output.generalisation),
        (plot_score_fits, output.fits),
    ):
        draw(summary, fits, path=figure, title=params.title, options=params.plots)


run_logged(main, snakemake.log[0], snakemake.resources)
