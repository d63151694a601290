"""Snakemake entry point: train a small LM from scratch on a dataset's sample, saving
checkpoints that later stages measure as models (results/training/{training}/…)."""

import logging

import polars as pl
import torch

from layerlaws.core.atomic import write_csv, write_json
from layerlaws.core.logs import run_logged
from layerlaws.models.devices import claim_devices
from layerlaws.models.loading import load_tokenizer
from layerlaws.pipeline.execution import Execution
from layerlaws.training.plan import TrainingSpec, unigram_cross_entropy, unigram_entropy
from layerlaws.training.train import model_config, packed_texts, train


def main() -> None:
    log = logging.getLogger("layerlaws")
    execution, params, output = (
        Execution.from_config(snakemake.config),
        snakemake.params,
        snakemake.output,
    )
    spec = TrainingSpec.of(params.training)
    tokenizer = load_tokenizer(snakemake.input.tokenizer)
    texts = pl.read_parquet(snakemake.input.corpus)["text"].to_list()
    sequences = packed_texts(tokenizer, texts, spec.context)
    held_out = None
    if snakemake.input.held_out:
        held_texts = pl.read_parquet(snakemake.input.held_out[0])["text"].to_list()
        held_out = packed_texts(tokenizer, held_texts, spec.context)[: spec.held_out_sequences]
    entropy = unigram_entropy(sequences)
    log.info(
        "%d texts make %d sequences of %d tokens; unigram entropy %.3f nats; %d steps of %d "
        "sequences (%.2f epochs)",
        len(texts),
        len(sequences),
        spec.context,
        entropy,
        spec.steps,
        spec.batch_size,
        spec.steps * spec.batch_size / len(sequences),
    )
    torch.set_num_threads(snakemake.threads)
    with claim_devices(execution.device, execution.lock_dir, 1) as claim:
        log.info("training on %s", claim.describe())
        run = train(
            spec,
            model_config(spec, tokenizer),
            tokenizer,
            sequences,
            held_out=held_out,
            folder=params.checkpoint_folder,
            device=claim.device,
        )
    write_csv(output.curve, pl.DataFrame(run.curve, infer_schema_length=None))
    write_csv(output.checkpoints, pl.DataFrame(run.checkpoints).drop("fingerprint"))
    write_json(
        output.summary,
        {
            "texts": len(texts),
            "sequences": len(sequences),
            "corpus_tokens": int(sequences.size),
            "unigram_entropy": entropy,
            "held_out_sequences": 0 if held_out is None else len(held_out),
            "held_out_unigram_loss": (
                None
                if held_out is None
                else unigram_cross_entropy(sequences, held_out, len(tokenizer))
            ),
            "resumed_from_step": run.resumed_from,
            "seconds": round(run.seconds, 3),
            "tokens_per_second": round(run.tokens_per_second, 1),
            "device": claim.device,
        },
    )


run_logged(main, snakemake.log[0])
