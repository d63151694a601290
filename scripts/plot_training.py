"""Snakemake entry point: a training run's loss curves (results/training/{training}/curve.*)."""

import json
from pathlib import Path

import polars as pl

from layerlaws.core.logs import run_logged
from layerlaws.training.plots import plot_training_curve


def main() -> None:
    curve = pl.read_csv(snakemake.input.curve, infer_schema_length=None)
    summary = json.loads(Path(snakemake.input.summary).read_text())
    plot_training_curve(
        curve,
        summary["unigram_entropy"],
        summary["held_out_unigram_loss"],
        path=snakemake.output[0],
        title=snakemake.params.title,
        options=snakemake.params.plots,
    )


run_logged(main, snakemake.log[0], snakemake.resources)
