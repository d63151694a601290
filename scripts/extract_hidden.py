"""Snakemake entry point: extract hidden states (results/hidden/{model}/{dataset}/)."""

import logging
import os

import polars as pl
import torch

from layerlaws.atomic import atomic_path
from layerlaws.devices import claim_device
from layerlaws.execution import Execution
from layerlaws.hidden import extract_hidden_states
from layerlaws.logs import run_logged
from layerlaws.models import load_model, read_facts


def main() -> None:
    log = logging.getLogger("layerlaws")
    execution = Execution.from_config(snakemake.config)
    facts = read_facts(snakemake.input.model)
    tokens = pl.read_parquet(snakemake.input.tokens)
    torch.set_num_threads(snakemake.threads)
    with claim_device(execution.device, execution.lock_dir) as claim:
        log.info(
            "running on %s (CUDA_VISIBLE_DEVICES=%r)",
            claim.describe(),
            os.environ.get("CUDA_VISIBLE_DEVICES"),
        )
        model = load_model(snakemake.input.model, snakemake.params.dtype, claim.device)
        with atomic_path(snakemake.output[0]) as folder:
            metadata = extract_hidden_states(
                model, facts, tokens, folder, execution.batch_size, claim.device
            )
    log.info(
        "stored %d rows × %d layers at %.0f tokens/s",
        metadata["n_rows"],
        metadata["num_layers"] + 1,
        metadata["tokens_per_second"] or 0,
    )


run_logged(main, snakemake.log[0])
