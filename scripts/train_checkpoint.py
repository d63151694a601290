"""Snakemake entry point: one segment of a training, from the checkpoint its predecessor
saved (from scratch for the first) up to step {step}, which it saves as a checkpoint
(results/training/{training}/checkpoints/step_<N>/) and records
(results/training/{training}/reached/step{step}.json): in this process, or data-parallel in
the job's N processes (its gpu resource, training.<key>.gpus) that torchrun starts
(layerlaws.training.segment_job)."""

import logging

from layerlaws.core.logs import run_logged
from layerlaws.models.devices import claim_devices
from layerlaws.pipeline.execution import Execution
from layerlaws.training.parallel import job_processes
from layerlaws.training.segment_job import SegmentJob, launch, run_segment


def main() -> None:
    execution = Execution.from_config(snakemake.config)
    settings = snakemake.config["training"][snakemake.wildcards.training]
    processes = job_processes(snakemake.resources.get("gpu", 0), settings["gpus"])
    end = int(snakemake.wildcards.step)
    with claim_devices(execution.device, execution.lock_dir, processes) as claim:
        logging.getLogger("layerlaws").info(
            "training up to step %d on %s in %d process(es)", end, claim.describe(), processes
        )
        job = SegmentJob(
            settings=dict(snakemake.params.training),
            end=end,
            tokenizer=snakemake.input.tokenizer,
            sequences=snakemake.input.sequences,
            held_out=snakemake.input.held_out,
            folder=snakemake.params.checkpoint_folder,
            record=snakemake.output[0],
            threads=max(1, snakemake.threads // processes),
            devices=claim.device if processes == 1 else f"{processes} × {claim.describe()}",
            on_gpu=bool(claim.gpu_ids),
        )
        if processes == 1:
            run_segment(job, claim.device)
        else:
            launch(job, processes, claim.gpu_ids)


run_logged(main, snakemake.log[0], snakemake.resources)
