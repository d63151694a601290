"""The job of ``equilearning_pass`` and ``equilearning_pass_shard``: one forward pass of a
model over a dataset's tokens that streams the equi-learning statistics and writes the PR,
fuzziness, token-view and evaluation tables, and the named observers' (one folder). With
``equilearning.shards`` above 1, a shard's job runs the pass over every N-th text into its
shard file and ``equilearning_pass`` merges the shards (``layerlaws.core.shards``,
``layerlaws.forward.shards``)."""

from __future__ import annotations

import logging
from typing import Any

import polars as pl
import torch

from layerlaws.core.progress import job_saves
from layerlaws.core.shards import ShardedJob
from layerlaws.equilearning.equilearning_pass import EquilearningPass
from layerlaws.equilearning.settings import EquilearningSettings
from layerlaws.forward.observers import ObserverSpec
from layerlaws.forward.shards import merge_pass_shards, write_pass_shard
from layerlaws.forward.span_corruption import seq2seq_vocabulary
from layerlaws.models.facts import read_facts
from layerlaws.models.loading import claimed_model, load_tokenizer


def prepared_pass(inputs: Any, params: Any, fuzziness_host_gb: float) -> EquilearningPass:
    """The pass of the rule's named ``inputs`` (tokens, model) and ``params``, holding
    ``fuzziness_host_gb`` GiB of open class sums in host memory at most."""
    tokenizer = load_tokenizer(inputs.model)
    pass_ = EquilearningPass.prepare(
        pl.read_parquet(inputs.tokens),
        read_facts(inputs.model),
        tokenizer,
        EquilearningSettings.from_params(params),
        params.probe,
        seq2seq_vocabulary(inputs.model, tokenizer),
        [
            ObserverSpec.from_params(entry, f"observers[{i}]")
            for i, entry in enumerate(params.observers)
        ],
        int(fuzziness_host_gb * 2**30),
    )
    if not pass_.observers.evaluated:
        logging.getLogger("layerlaws").warning(
            "no held-out evaluation: %s has no trained head for %s targets",
            inputs.model,
            pass_.probe,
        )
    return pass_


def run_pass_job(job: Any, execution: Any) -> None:
    """Run the job ``job`` (a Snakemake script's ``snakemake`` object: its input, output,
    params, wildcards, threads and resources) under the config's ``execution`` settings
    (``layerlaws.pipeline.execution.Execution``)."""
    inputs, output, params = job.input, job.output, job.params
    pass_ = prepared_pass(inputs, params, execution.fuzziness_host_gb)
    sharded = ShardedJob.of(params.get("shards", 1), job.wildcards, inputs)

    def measure(indices, saves):
        torch.set_num_threads(job.threads)
        devices = execution.device_request(job.resources.gpu)
        with claimed_model(
            inputs.model, params.dtype, params.quantization, devices, sharded.described()
        ) as (model, claim):
            return pass_.run(
                model, execution.batch_size, claim.device, saves=saves, sequence_indices=indices
            )

    sharded.run(
        pass_.tokens["sentence_id"].n_unique(),
        saves=lambda: job_saves(
            output[0],
            [inputs.tokens, inputs.model],
            dict(params.items()),
            execution.checkpoint_minutes,
        ),
        measure=measure,
        merge=lambda files: merge_pass_shards(
            files, pass_.observers.all, lambda: pass_.fresh_observers().all
        ),
        write_shard=lambda report: write_pass_shard(output[0], pass_.observers.all, report),
        write_outputs=lambda report, saves: pass_.write_outputs(output, report, saves),
    )
