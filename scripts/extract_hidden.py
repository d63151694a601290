"""Snakemake entry point: keep every layer's hidden states (results/hidden/{model}/{dataset}/)."""

import os
import shutil
from pathlib import Path

import polars as pl
import torch

from layerlaws.core.logs import run_logged
from layerlaws.core.progress import job_saves
from layerlaws.forward.kept_states import storage_dtype
from layerlaws.forward.kept_writer import extract_hidden_states
from layerlaws.forward.masking import probe_layers, probe_of, probe_tokens
from layerlaws.forward.settings import MaskingSettings
from layerlaws.forward.span_corruption import seq2seq_vocabulary
from layerlaws.models.facts import read_facts
from layerlaws.models.loading import claimed_model, load_tokenizer
from layerlaws.pipeline.execution import Execution


def main() -> None:
    execution, params = Execution.from_config(snakemake.config), snakemake.params
    facts = read_facts(snakemake.input.model)
    tokenizer = load_tokenizer(snakemake.input.model)
    probe = probe_of(params.probe, facts.model_type)
    tokens = probe_tokens(
        pl.read_parquet(snakemake.input.tokens),
        probe=probe,
        vocab_size=facts.vocab_size,
        mask_token_id=tokenizer.mask_token_id,
        masking=MaskingSettings.from_config(params.masking),
        special_tokens=params.special_tokens,
        encoder_decoder=params.encoder_decoder,
        seq2seq=seq2seq_vocabulary(snakemake.input.model, tokenizer),
    )
    output = Path(snakemake.output[0])
    saves = job_saves(
        output,
        [snakemake.input.tokens, snakemake.input.model],
        dict(params.items()),
        execution.checkpoint_minutes,
    )
    # Shards are written in a folder beside the save (kept when the job is killed) and
    # moved into place when every row is in them.
    partial = saves.path.with_suffix(".partial")
    torch.set_num_threads(snakemake.threads)
    with claimed_model(
        snakemake.input.model,
        params.dtype,
        params.quantization,
        execution.device_request(snakemake.resources.gpu),
    ) as (model, claim):
        extract_hidden_states(
            model,
            facts,
            tokens,
            out_folder=partial,
            batch_size=execution.batch_size,
            device=claim.device,
            storage_dtype=storage_dtype(params.dtype, params.storage_dtype),
            shard_rows=execution.hidden_state_shard_rows,
            saves=saves,
            layers=probe_layers(
                probe, facts.model_type, params.encoder_decoder, params.layer_states
            ),
        )
    if output.exists():
        shutil.rmtree(output)
    os.replace(partial, output)
    saves.finish()


run_logged(main, snakemake.log[0], snakemake.resources)
