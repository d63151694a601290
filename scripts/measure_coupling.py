"""Snakemake entry point: block coupling and trajectories of a prompt set, for the trained
model and its randomly initialised twin (results/coupling/…, results/trajectories/…).

``vjp_chunk`` is read from the config rather than params: it changes memory, not results.
"""

import logging

import numpy as np
import polars as pl
import torch

from layerlaws.atomic import atomic_path, write_csv
from layerlaws.block_coupling import chosen_layers, measure_prompt_set, prompt_token_ids
from layerlaws.devices import claim_device
from layerlaws.logs import run_logged
from layerlaws.models import load_model, load_tokenizer, randomly_initialised_twin, read_facts


def save_npz(path, arrays) -> None:
    with atomic_path(path) as temporary, open(temporary, "wb") as handle:
        np.savez(handle, **arrays)


def main() -> None:
    execution, options = snakemake.config["execution"], snakemake.params.options
    prompt_config, output = snakemake.params.prompts, snakemake.output
    facts = read_facts(snakemake.input.model)
    texts = list(prompt_config["texts"])
    if snakemake.input.sentences:
        sample = pl.read_parquet(snakemake.input.sentences[0])
        texts += sample["text"].head(prompt_config["n_from_dataset"]).to_list()
    tokenizer = load_tokenizer(snakemake.input.model)
    prompts = prompt_token_ids(
        texts,
        tokenizer,
        prompt_config["max_tokens"],
        prompt_config["truncate"],
        facts.max_positions,
    )
    layers = chosen_layers(options["token_layers"], facts.num_layers)
    torch.set_num_threads(snakemake.threads)
    with claim_device(execution["device"], execution["lock_dir"]) as claim:
        logging.getLogger("layerlaws").info(
            "running on %s; %d prompts, token layers %s", claim.describe(), len(prompts), layers
        )
        trained = load_model(
            snakemake.input.model, snakemake.params.dtype, claim.device, attention="eager"
        )
        twins = {
            "trained": trained,
            "random": randomly_initialised_twin(trained, options["random_seed"]),
        }
        result = measure_prompt_set(
            twins,
            prompts,
            [tokenizer.convert_ids_to_tokens(ids) for ids in prompts],
            layers,
            options["k"],
            options["svd"],
            snakemake.config["coupling"]["vjp_chunk"],
            options["lss_window"],
            claim.device,
        )
    write_csv(output.depth, result.depth)
    write_csv(output.tokens, result.tokens)
    write_csv(output.trajectories, result.trajectories)
    write_csv(output.windows, result.windows)
    save_npz(output.factors, result.factors)
    save_npz(output.streams, result.streams)


run_logged(main, snakemake.log[0])
