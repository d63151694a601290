"""Snakemake entry point: block coupling and trajectories of a prompt set, for the trained
model and its randomly initialised twin, or for a training checkpoint its own step-0
weights (results/coupling/{model}/{prompts}/, trajectories in its trajectories/); with
``coupling.shards`` above 1, the shards' measurements merged
(``layerlaws.coupling.job``).

The measurements of the prompts done are saved beside depth.csv (``.resume/depth.csv.pt``,
``layerlaws.core.progress``) at most every ``execution.checkpoint_minutes``; a rerun after
a kill measures only the prompts left, and the save is removed once every output is
written."""

import logging

import torch

from layerlaws.core.logs import run_logged
from layerlaws.core.progress import job_saves
from layerlaws.coupling.job import job_prompts, measure_job, read_shards, write_tables
from layerlaws.coupling.measurement import TokenCoupling, combine
from layerlaws.coupling.settings import CouplingSettings
from layerlaws.models.facts import read_facts
from layerlaws.pipeline.execution import Execution


def main() -> None:
    execution, params = Execution.from_config(snakemake.config), snakemake.params
    output = snakemake.output
    settings = CouplingSettings.from_params(params)
    model, initial = snakemake.input.model, snakemake.input.initial
    prompts, labels = job_prompts(model, params.prompts, snakemake.input.sentences)
    saves = job_saves(
        output.depth,
        [model, *snakemake.input.sentences, *initial],
        dict(params.items()),
        execution.checkpoint_minutes,
    )
    if snakemake.input.shards:
        measured = read_shards(snakemake.input.shards, len(prompts))
    else:
        torch.set_num_threads(snakemake.threads)
        measured = measure_job(
            model,
            initial[0] if initial else None,
            prompts,
            range(len(prompts)),
            settings=settings,
            dtype=params.dtype,
            jacobian_prompts=params.prompts["jacobian_prompts"],
            execution=execution,
            gpus=max(1, snakemake.resources.gpu),
            saves=saves,
        )
    token_coupling = TokenCoupling.of(settings, read_facts(model).num_layers)
    weights = list(dict.fromkeys(name for name, _ in measured))  # trained, random
    write_tables(output, combine(measured, weights, labels, token_coupling, settings))
    logging.getLogger("layerlaws").info("progress saves: %s", saves.finish())


run_logged(main, snakemake.log[0])
