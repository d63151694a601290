"""Snakemake entry point: a training's loss curve, checkpoint table and summary
(results/training/{training}/curve.csv, checkpoints.csv, training.json), combined from the
records of its segments (train_checkpoint) and its packed corpus's facts."""

import json
from pathlib import Path

import polars as pl

from layerlaws.core.atomic import write_csv, write_json
from layerlaws.core.logs import run_logged
from layerlaws.training.plan import TrainingSpec
from layerlaws.training.segments import checkpoint_rows, training_curve, training_summary


def main() -> None:
    spec = TrainingSpec.of(snakemake.params.training)
    records = [json.loads(Path(path).read_text()) for path in snakemake.input.records]
    corpus = json.loads(Path(snakemake.input.corpus).read_text())
    curve = training_curve(records)
    write_csv(snakemake.output.curve, pl.DataFrame(curve, infer_schema_length=None))
    write_csv(snakemake.output.checkpoints, pl.DataFrame(checkpoint_rows(spec, curve)))
    write_json(snakemake.output.summary, training_summary(records, corpus))


run_logged(main, snakemake.log[0], snakemake.resources)
