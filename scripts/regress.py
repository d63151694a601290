"""Snakemake entry point: per-layer prediction residuals (results/equilearning/…/pr.csv)."""

from layerlaws.atomic import write_csv
from layerlaws.equilearning import prediction_residual_table
from layerlaws.execution import Execution
from layerlaws.hidden import HiddenStates
from layerlaws.logs import run_logged


def main() -> None:
    params = snakemake.params
    table = prediction_residual_table(
        HiddenStates.open(snakemake.input.hidden),
        offsets=params.offsets,
        norms=params.norms,
        controls=params.controls,
        shuffle_seed=params.shuffle_seed,
        cutoff=params.cutoff,
        regression_chunk_rows=Execution.from_config(snakemake.config).regression_chunk_rows,
    )
    write_csv(snakemake.output[0], table)


run_logged(main, snakemake.log[0])
