"""Snakemake entry point: block coupling and trajectories of a prompt set, for the trained
model and its randomly initialised twin, or for a training checkpoint its own step-0
weights (results/coupling/{model}/{prompts}/, trajectories in its trajectories/).

The measurements of the prompts done are saved beside depth.csv (``.resume/depth.csv.pt``,
``layerlaws.core.progress``) at most every ``execution.checkpoint_minutes``; a rerun after
a kill measures only the prompts left, and the save is removed once every output is
written."""

import logging

import polars as pl
import torch

from layerlaws.core.atomic import write_csv, write_npz
from layerlaws.core.logs import run_logged
from layerlaws.core.progress import job_saves
from layerlaws.coupling.measurement import TokenCoupling, measure_prompt_set
from layerlaws.coupling.settings import CouplingSettings
from layerlaws.models.devices import claim_devices
from layerlaws.models.facts import read_facts
from layerlaws.models.loading import coupling_twins, load_tokenizer, plan_placement
from layerlaws.pipeline.execution import Execution
from layerlaws.text.corpus import prompt_texts
from layerlaws.text.tokens import tokenize_prompts


def main() -> None:
    log = logging.getLogger("layerlaws")
    execution, params = Execution.from_config(snakemake.config), snakemake.params
    settings = CouplingSettings.from_params(params)
    prompt_set, output = params.prompts, snakemake.output
    facts = read_facts(snakemake.input.model)
    samples = [pl.read_parquet(path) for path in snakemake.input.sentences]
    texts = prompt_texts(prompt_set, samples)
    tokenizer = load_tokenizer(snakemake.input.model)
    prompts = tokenize_prompts(
        texts, tokenizer, prompt_set["max_tokens"], prompt_set["too_long"], facts.max_positions
    )
    token_coupling = TokenCoupling.of(settings, facts.num_layers)
    saves = job_saves(
        output.depth,
        [snakemake.input.model, *snakemake.input.sentences, *snakemake.input.initial],
        dict(params.items()),
        execution.checkpoint_minutes,
    )
    torch.set_num_threads(snakemake.threads)
    gpus = max(1, snakemake.resources.gpu)
    with claim_devices(execution.device, execution.lock_dir, gpus) as claim:
        log.info(
            "running on %s; %d prompts, token layer pairs %s",
            claim.describe(),
            len(prompts),
            token_coupling.layer_pairs,
        )
        placement = plan_placement(snakemake.input.model, params.dtype, claim.devices)
        twins = coupling_twins(
            snakemake.input.model,
            snakemake.input.initial[0] if snakemake.input.initial else None,
            params.dtype,
            placement,
            settings.init_seed,
        )
        result = measure_prompt_set(
            twins,
            prompts,
            labels=[tokenizer.convert_ids_to_tokens(ids) for ids in prompts],
            token_coupling=token_coupling,
            settings=settings,
            vjp_chunk=execution.vjp_chunk,
            device=claim.device,
            saves=saves,
            jacobian_prompts=prompt_set["jacobian_prompts"],
        )
    write_csv(output.depth, result.depth)
    write_csv(output.singular_values, result.singular_values)
    write_csv(output.tokens, result.tokens)
    write_csv(output.trajectories, result.trajectories)
    write_csv(output.layers, result.layers)
    write_npz(output.factors, result.factors)
    write_npz(output.couplings, result.couplings)
    write_npz(output.streams, result.streams)
    log.info("progress saves: %s", saves.finish())


run_logged(main, snakemake.log[0])
