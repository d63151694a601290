"""Snakemake entry point: a training's corpus and held-out texts tokenised and packed once
(results/training/{training}/sequences.npy, held_out_sequences.npy, corpus.json), for
every segment of the training to read. The corpus is its dataset's sample, or (``corpus:
source``) its whole source, streamed: a batch of texts at a time is tokenised and its
sequences appended to the file, so the source is never in memory; a token budget stops
the packing at its sequences."""

import logging
from collections.abc import Iterator

import numpy as np
import polars as pl

from layerlaws.core.atomic import atomic_path, write_json
from layerlaws.core.logs import run_logged
from layerlaws.models.loading import load_tokenizer
from layerlaws.pipeline.execution import Execution
from layerlaws.text.corpus import excluded_sources
from layerlaws.text.sources import iter_texts
from layerlaws.training.packing import PackedWriter, text_batches
from layerlaws.training.plan import (
    TrainingSpec,
    check_budget,
    check_corpus_size,
    steps_for_batches,
)
from layerlaws.training.segments import corpus_facts
from layerlaws.training.train import packed_texts, separator_id, tokenize_texts

log = logging.getLogger("layerlaws")


def texts_of(path: str) -> list[str]:
    return pl.read_parquet(path)["text"].to_list()


def corpus_texts(spec: TrainingSpec) -> Iterator[str]:
    """The corpus's texts: the sample's, or the source's as it streams (without the texts
    the dataset leaves out)."""
    if spec.corpus == "sample":
        return iter(texts_of(snakemake.input.corpus[0]))
    found = iter_texts(snakemake.params.source, excluded_sources(snakemake.input.corpus))
    return (text for text, _ in found)


def main() -> None:
    spec = TrainingSpec.of(snakemake.params.training)
    key, dataset = snakemake.wildcards.training, snakemake.params.training["dataset"]
    tokenizer = load_tokenizer(snakemake.input.tokenizer)
    batch = Execution.from_config(snakemake.config).shard_texts
    with atomic_path(snakemake.output.sequences) as temporary, open(temporary, "wb") as handle:
        writer = PackedWriter(
            handle, spec.context, separator_id(tokenizer), len(tokenizer), spec.budget_sequences
        )
        for texts in text_batches(corpus_texts(spec), batch):
            more = writer.add(tokenize_texts(tokenizer, texts))
            if spec.corpus == "source":
                log.info("%d texts packed: %d sequences", writer.texts, writer.sequences)
            if not more:
                break
        packed = writer.finish()
        check_budget(packed.sequences, spec, dataset)
        check_corpus_size(packed.sequences, spec, key)
    # No held-out dataset: no sequences, and no held-out loss.
    held_out = np.empty((0, spec.context), dtype=np.int64)
    if snakemake.input.held_out:
        held_texts = texts_of(snakemake.input.held_out[0])
        held_out = packed_texts(tokenizer, held_texts, spec.context)[: spec.held_out_sequences]
    facts = corpus_facts(packed.texts, packed.sequences, packed.counts, held_out)
    read = spec.sequences_read(spec.steps, packed.sequences)
    per_step = read / spec.steps
    log.info(
        "%d texts of %s (%s) make %d sequences of %d tokens; unigram entropy %.3f nats; %d "
        "steps of %.1f sequences (batch_size %d), %.2f passes; %d held-out sequences",
        packed.texts,
        dataset,
        spec.corpus,
        packed.sequences,
        spec.context,
        facts["unigram_entropy"],
        spec.steps,
        per_step,
        spec.batch_size,
        read / packed.sequences,
        len(held_out),
    )
    if spec.epochs is not None and not 0.5 <= per_step / spec.batch_size <= 2:
        log.warning(
            "each step reads %.1f sequences, batch_size is %d: training.%s.steps fits another "
            "corpus size; for steps of about %d sequences, set it to %d",
            per_step,
            spec.batch_size,
            key,
            spec.batch_size,
            steps_for_batches(packed.sequences, spec),
        )
    with atomic_path(snakemake.output.held_out) as temporary, open(temporary, "wb") as handle:
        np.save(handle, held_out)
    write_json(snakemake.output.corpus, facts)


run_logged(main, snakemake.log[0], snakemake.resources)
