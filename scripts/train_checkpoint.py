"""Snakemake entry point: one segment of a training, from the checkpoint its predecessor
saved (from scratch for the first) up to step {step}, which it saves as a checkpoint
(results/training/{training}/checkpoints/step_<N>/) and records
(results/training/{training}/reached/step{step}.json)."""

import logging

import numpy as np
import torch

from layerlaws.core.atomic import write_json
from layerlaws.core.logs import run_logged
from layerlaws.models.devices import claim_devices
from layerlaws.models.loading import load_tokenizer
from layerlaws.pipeline.execution import Execution
from layerlaws.training.plan import TrainingSpec
from layerlaws.training.segments import segment_record
from layerlaws.training.train import model_config, train


def main() -> None:
    execution = Execution.from_config(snakemake.config)
    spec, end = TrainingSpec.of(snakemake.params.training), int(snakemake.wildcards.step)
    tokenizer = load_tokenizer(snakemake.input.tokenizer)
    sequences = np.load(snakemake.input.sequences, mmap_mode="r")  # a whole source: on disk
    held_out = np.load(snakemake.input.held_out)
    torch.set_num_threads(snakemake.threads)
    with claim_devices(execution.device, execution.lock_dir, 1) as claim:
        logging.getLogger("layerlaws").info("training up to step %d on %s", end, claim.describe())
        run = train(
            spec,
            model_config(spec, tokenizer),
            tokenizer,
            sequences,
            held_out=held_out if len(held_out) else None,
            folder=snakemake.params.checkpoint_folder,
            device=claim.device,
            until=end,
        )
    write_json(
        snakemake.output[0],
        segment_record(
            spec,
            run.curve,
            end,
            resumed_from=run.resumed_from,
            seconds=run.seconds,
            device=claim.device,
            n_sequences=len(sequences),
        ),
    )


run_logged(main, snakemake.log[0], snakemake.resources)
