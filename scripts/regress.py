"""Snakemake entry point: per-layer prediction residuals (results/equilearning/…/pr.csv)."""

from layerlaws.atomic import write_csv
from layerlaws.equilearning import prediction_residual_table
from layerlaws.hidden import HiddenStates
from layerlaws.logs import run_logged


def main() -> None:
    analysis = snakemake.params.analysis
    table = prediction_residual_table(
        HiddenStates.open(snakemake.input.hidden),
        offsets=analysis["targets"],
        norms=analysis["norms"],
        controls=analysis["controls"],
        shuffle_seed=analysis["shuffle_seed"],
        cutoff=analysis["cutoff"],
        chunk_rows=analysis["chunk_rows"],
    )
    write_csv(snakemake.output[0], table)


run_logged(main, snakemake.log[0])
