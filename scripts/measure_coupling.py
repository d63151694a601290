"""Snakemake entry point: block coupling and trajectories of a prompt set, for the trained
model and its randomly initialised twin (results/coupling/…, results/trajectories/…).

``vjp_chunk`` is read from the config rather than params: it changes memory, not results.
"""

import logging

import numpy as np
import polars as pl
import torch

from layerlaws.atomic import atomic_path, write_csv
from layerlaws.block_coupling import measure_prompt, prompt_token_ids
from layerlaws.devices import claim_device
from layerlaws.errors import LayerlawsError
from layerlaws.logs import run_logged
from layerlaws.models import load_model, load_tokenizer, randomly_initialised_twin, read_facts


def save_npz(path, arrays) -> None:
    with atomic_path(path) as temporary, open(temporary, "wb") as handle:
        np.savez(handle, **arrays)


def main() -> None:
    log = logging.getLogger("layerlaws")
    execution, options = snakemake.config["execution"], snakemake.params.options
    prompt_config = snakemake.params.prompts
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
    layers = options["token_layers"] or [max(1, facts.num_layers // 2)]
    if max(layers) > facts.num_layers:
        raise LayerlawsError(
            f"coupling.token_layers {layers} name a layer beyond the model's {facts.num_layers}"
        )
    torch.set_num_threads(snakemake.threads)
    tables = {"depth": [], "tokens": [], "trajectories": [], "windows": []}
    factors, streams = {}, {}
    with claim_device(execution["device"], execution["lock_dir"]) as claim:
        log.info(
            "running on %s; %d prompts, token layers %s", claim.describe(), len(prompts), layers
        )
        trained = load_model(
            snakemake.input.model, snakemake.params.dtype, claim.device, attention="eager"
        )
        twins = {
            "trained": trained,
            "random": randomly_initialised_twin(trained, options["random_seed"]),
        }
        for weights, model in twins.items():
            for index, ids in enumerate(prompts):
                measured = measure_prompt(
                    model,
                    torch.tensor([ids], device=claim.device),
                    layers,
                    options["k"],
                    options["svd"],
                    snakemake.config["coupling"]["vjp_chunk"],
                    options["lss_window"],
                )
                tag = {"weights": weights, "prompt": str(index)}
                for name in tables:
                    tables[name] += [tag | row for row in getattr(measured, name)]
                for key, array in measured.factors.items():
                    factors[f"{weights}/{index}/{key}"] = array
                streams[f"{weights}/{index}"] = measured.streams
                log.info("%s prompt %d (%d tokens) done", weights, index, len(ids))
    depth = pl.DataFrame(tables["depth"])
    mean = (
        depth.group_by("weights", "layer_a", "layer_b", "k", maintain_order=True)
        .agg(pl.col("miscoupling").mean())
        .with_columns(prompt=pl.lit("mean"))
    )
    write_csv(snakemake.output.depth, pl.concat([depth, mean.select(depth.columns)]))
    write_csv(snakemake.output.tokens, pl.DataFrame(tables["tokens"]))
    texts_of = {str(i): tokenizer.convert_ids_to_tokens(ids) for i, ids in enumerate(prompts)}
    trajectories = pl.DataFrame(tables["trajectories"]).with_columns(
        text=pl.struct("prompt", "token").map_elements(
            lambda row: texts_of[row["prompt"]][row["token"]], return_dtype=pl.String
        )
    )
    write_csv(snakemake.output.trajectories, trajectories)
    write_csv(snakemake.output.windows, pl.DataFrame(tables["windows"]))
    save_npz(snakemake.output.factors, factors)
    save_npz(snakemake.output.streams, streams)


run_logged(main, snakemake.log[0])
