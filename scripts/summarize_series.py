"""Snakemake entry point: a series' summary table and its coupling fits
(results/series/{series}/summary.csv, fits.csv)."""

import logging

from layerlaws.core.atomic import write_csv
from layerlaws.core.logs import run_logged
from layerlaws.series.summary import coupling_fits, series_summary


def main() -> None:
    params = snakemake.params
    summary = series_summary(params.members, params.x, params.norm)
    fits = coupling_fits(summary)
    write_csv(snakemake.output.summary, summary)
    write_csv(snakemake.output.fits, fits)
    logging.getLogger("layerlaws").info(
        "%d models, %d rows, %d fits", summary["model"].n_unique(), len(summary), len(fits)
    )


run_logged(main, snakemake.log[0])
