"""Snakemake entry point: a training's corpus and held-out texts tokenised and packed once
(results/training/{training}/sequences.npy, held_out_sequences.npy, corpus.json), for
every segment of the training to read."""

import logging

import numpy as np
import polars as pl

from layerlaws.core.atomic import atomic_path, write_json
from layerlaws.core.logs import run_logged
from layerlaws.models.loading import load_tokenizer
from layerlaws.training.plan import TrainingSpec, batches_per_epoch, epoch_corpus
from layerlaws.training.segments import corpus_facts
from layerlaws.training.train import packed_texts


def texts_of(path: str) -> list[str]:
    return pl.read_parquet(path)["text"].to_list()


def save_array(path: str, array: np.ndarray) -> None:
    with atomic_path(path) as temporary, open(temporary, "wb") as handle:
        np.save(handle, array)


def main() -> None:
    spec = TrainingSpec.of(snakemake.params.training)
    tokenizer = load_tokenizer(snakemake.input.tokenizer)
    texts = texts_of(snakemake.input.corpus)
    dataset = snakemake.params.training["dataset"]
    sequences = epoch_corpus(packed_texts(tokenizer, texts, spec.context), spec, dataset)
    batches_per_epoch(len(sequences), spec)  # fails here if there is not one batch
    # No held-out dataset: no sequences, and no held-out loss.
    held_out = np.empty((0, spec.context), dtype=np.int64)
    if snakemake.input.held_out:
        held_texts = texts_of(snakemake.input.held_out[0])
        held_out = packed_texts(tokenizer, held_texts, spec.context)[: spec.held_out_sequences]
    facts = corpus_facts(len(texts), sequences, held_out, len(tokenizer))
    logging.getLogger("layerlaws").info(
        "%d texts make %d sequences of %d tokens; unigram entropy %.3f nats; %d steps of %d "
        "sequences (%.2f epochs); %d held-out sequences",
        len(texts),
        len(sequences),
        spec.context,
        facts["unigram_entropy"],
        spec.steps,
        spec.batch_size,
        spec.steps * spec.batch_size / len(sequences),
        len(held_out),
    )
    save_array(snakemake.output.sequences, sequences)
    save_array(snakemake.output.held_out, held_out)
    write_json(snakemake.output.corpus, facts)


run_logged(main, snakemake.log[0], snakemake.resources)
