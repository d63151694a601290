"""Snakemake entry point: one shard of a prompt set's block coupling and trajectories
(``coupling.shards``; results/coupling/{model}/{prompts}/shards/{shard}.pt),
every N-th prompt measured under the trained and random weights, for
``measure_coupling`` to merge (``layerlaws.coupling.job``). Its progress is saved beside
its output and a rerun after a kill resumes, as in ``measure_coupling``."""

import logging

import torch

from layerlaws.core.logs import run_logged
from layerlaws.core.progress import job_saves
from layerlaws.coupling.job import job_prompts, measure_job, write_shard
from layerlaws.coupling.measurement import shard_prompts
from layerlaws.coupling.settings import CouplingSettings
from layerlaws.pipeline.execution import Execution


def main() -> None:
    execution, params = Execution.from_config(snakemake.config), snakemake.params
    model, initial = snakemake.input.model, snakemake.input.initial
    prompts, _ = job_prompts(model, params.prompts, snakemake.input.sentences)
    indices = shard_prompts(len(prompts), int(snakemake.wildcards.shard), params.shards)
    saves = job_saves(
        snakemake.output[0],
        [model, *snakemake.input.sentences, *initial],
        dict(params.items()),
        execution.checkpoint_minutes,
    )
    torch.set_num_threads(snakemake.threads)
    measured = measure_job(
        model,
        initial[0] if initial else None,
        prompts,
        indices,
        settings=CouplingSettings.from_params(params),
        dtype=params.dtype,
        jacobian_prompts=params.prompts["jacobian_prompts"],
        execution=execution,
        gpus=max(1, snakemake.resources.gpu),
        saves=saves,
    )
    write_shard(snakemake.output[0], measured)
    logging.getLogger("layerlaws").info("progress saves: %s", saves.finish())


run_logged(main, snakemake.log[0])
