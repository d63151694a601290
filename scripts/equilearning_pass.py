"""Snakemake entry point of ``equilearning_pass`` and ``equilearning_pass_shard``: one
forward pass of a model over a dataset's tokens that streams the equi-learning statistics
and writes the PR, fuzziness, token-view and evaluation tables
(results/equilearning/…/pr.csv), and the named observers' (``equilearning.observers``:
results/equilearning/…/observers/<name>.csv, written as one folder). With
``equilearning.shards`` above 1, a shard job runs the pass over every N-th text into
shards/{shard}.pt and ``equilearning_pass`` merges the shards
(``layerlaws.forward.shards``)."""

import logging
from dataclasses import asdict

import polars as pl
import torch

from layerlaws.core.atomic import atomic_path, write_csv, write_json, write_npz
from layerlaws.core.logs import run_logged
from layerlaws.core.progress import job_saves
from layerlaws.core.shards import shard_indices
from layerlaws.equilearning.equilearning_pass import EquilearningPass
from layerlaws.equilearning.settings import EquilearningSettings
from layerlaws.forward.observers import ObserverSpec
from layerlaws.forward.shards import merge_pass_shards, write_pass_shard
from layerlaws.forward.span_corruption import seq2seq_vocabulary
from layerlaws.models.facts import read_facts
from layerlaws.models.loading import claimed_model, load_tokenizer
from layerlaws.pipeline.execution import Execution


def main() -> None:
    log = logging.getLogger("layerlaws")
    execution, params, output = (
        Execution.from_config(snakemake.config),
        snakemake.params,
        snakemake.output,
    )
    settings = EquilearningSettings.from_params(params)
    tokenizer = load_tokenizer(snakemake.input.model)
    pass_ = EquilearningPass.prepare(
        pl.read_parquet(snakemake.input.tokens),
        read_facts(snakemake.input.model),
        tokenizer,
        settings,
        params.probe,
        seq2seq_vocabulary(snakemake.input.model, tokenizer),
        [
            ObserverSpec.from_params(entry, f"observers[{index}]")
            for index, entry in enumerate(params.observers)
        ],
    )
    facts, observers = pass_.facts, pass_.observers
    if not observers.evaluated:
        log.warning(
            "no held-out evaluation: %s has no trained head for %s targets",
            snakemake.input.model,
            pass_.probe,
        )
    shard = snakemake.wildcards.get("shard")
    shards = getattr(snakemake.input, "shards", [])
    saves = None
    if shards:
        report = merge_pass_shards(shards, observers.all, lambda: pass_.fresh_observers().all)
    else:
        saves = job_saves(
            output[0],
            [snakemake.input.tokens, snakemake.input.model],
            dict(params.items()),
            execution.checkpoint_minutes,
        )
        count = pass_.tokens["sentence_id"].n_unique()
        torch.set_num_threads(snakemake.threads)
        with claimed_model(
            snakemake.input.model,
            params.dtype,
            params.quantization,
            execution.device_request(snakemake.resources.gpu),
            "" if shard is None else f"; shard {shard} of {params.shards}",
        ) as (model, claim):
            report = pass_.run(
                model,
                execution.batch_size,
                claim.device,
                saves=saves,
                sequence_indices=None
                if shard is None
                else shard_indices(count, int(shard), params.shards),
            )
    if shard is not None:
        write_pass_shard(output[0], observers.all, report)
        log.info("progress saves: %s", saves.finish())
        return
    tables = pass_.tables()
    for name, table in tables.items():
        write_csv(output[name], table)
    write_npz(output.token_states, observers.token_states())
    with atomic_path(output.observers) as folder:
        folder.mkdir()
        for name, table in observers.named_tables().items():
            table.write_csv(folder / f"{name}.csv")
    progress = saves.finish() if saves is not None else {}
    write_json(
        output.report,
        {
            **asdict(facts),
            **report,
            **progress,
            "probe": pass_.probe,
            "layers": asdict(pass_.layers),
        },
    )
    log.info(
        "%d rows × %d layers at %.0f tokens/s; held-out loss %.4f",
        report["n_rows"],
        facts.num_layers + 1,
        report["tokens_per_second"] or 0,
        tables["evaluation"]["loss"][0],
    )


run_logged(main, snakemake.log[0], snakemake.resources)
