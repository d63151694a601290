"""Snakemake entry point of ``measure_coupling`` and ``measure_coupling_shard``: block
coupling and trajectories of a prompt set, for the trained model and its randomly
initialised twin, or for a training checkpoint its own step-0 weights
(results/coupling/{model}/{prompts}/, trajectories in its trajectories/). With
``coupling.shards`` above 1, a shard job measures every N-th prompt into
shards/{shard}.pt (an archive of its prompts' files) and ``measure_coupling`` merges the
shards (``layerlaws.core.shards``, ``layerlaws.coupling.job``). The Jacobians are
measured on the prompt set's subset (``layerlaws.coupling.subset``); prompts.csv says
where each prompt comes from and whether its Jacobians were measured.

Each prompt's measurement is written to a file of its own beside the job's first output as
soon as it is measured (``.resume/depth.csv.prompts/``), and how many are done is saved
there (``.resume/depth.csv.pt``, ``layerlaws.core.progress``) at most every
``execution.checkpoint_minutes``; a rerun after a kill measures only the prompts left. The
outputs are written from the files a prompt at a time, then the files and the save are
removed."""

import torch

from layerlaws.core.atomic import write_csv
from layerlaws.core.logs import run_logged
from layerlaws.core.progress import job_saves
from layerlaws.core.shards import ShardedJob
from layerlaws.coupling.job import (
    ShardArchives,
    job_prompts,
    measure_job,
    prompt_table,
    write_shard,
)
from layerlaws.coupling.measurement import TokenCoupling
from layerlaws.coupling.prompt_set import write_outputs
from layerlaws.coupling.settings import CouplingSettings
from layerlaws.coupling.subset import jacobian_indices
from layerlaws.models.facts import read_facts
from layerlaws.pipeline.execution import Execution


def main() -> None:
    execution, params, output = (
        Execution.from_config(snakemake.config),
        snakemake.params,
        snakemake.output,
    )
    settings = CouplingSettings.from_params(params)
    model, initial = snakemake.input.model, snakemake.input.initial
    prompts, labels, datasets = job_prompts(model, params.prompts, snakemake.input.sentences)
    jacobians = jacobian_indices(params.prompts, datasets)

    def measure(indices, saves):
        torch.set_num_threads(snakemake.threads)
        return measure_job(
            model,
            initial[0] if initial else None,
            prompts,
            indices,
            settings=settings,
            dtype=params.dtype,
            quantization=params.quantization,
            jacobian_indices=jacobians,
            devices=execution.device_request(snakemake.resources.gpu),
            vjp_chunk=execution.vjp_chunk,
            saves=saves,
        )

    def write_all(measured, _saves):
        token_coupling = TokenCoupling.of(settings, read_facts(model).num_layers)
        write_outputs(measured, labels, token_coupling, settings, output)
        write_csv(output.prompts, prompt_table(prompts, datasets, jacobians))

    ShardedJob.of(params.get("shards", 1), snakemake.wildcards, snakemake.input).run(
        len(prompts),
        saves=lambda: job_saves(
            output[0],
            [model, *snakemake.input.sentences, *initial],
            dict(params.items()),
            execution.checkpoint_minutes,
        ),
        measure=measure,
        merge=lambda files: ShardArchives(files, len(prompts)),
        write_shard=lambda measured: write_shard(output[0], measured),
        write_outputs=write_all,
        written=lambda measured: measured.remove(),
    )


run_logged(main, snakemake.log[0], snakemake.resources)
