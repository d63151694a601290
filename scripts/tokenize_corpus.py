"""Snakemake entry point: tokenise a whole corpus into shards (results/signatures/…/shards)."""

import logging

from layerlaws.core.atomic import atomic_path
from layerlaws.core.logs import run_logged
from layerlaws.models.loading import load_tokenizer
from layerlaws.pipeline.execution import Execution
from layerlaws.text.corpus import excluded_sources
from layerlaws.text.sources import iter_texts
from layerlaws.text.tokens import tokenize_corpus


def main() -> None:
    tokenizer = load_tokenizer(snakemake.input.model)
    with atomic_path(snakemake.output[0]) as folder:
        counts = tokenize_corpus(
            iter_texts(snakemake.params.source, excluded_sources(snakemake.input.exclude)),
            tokenizer,
            folder,
            shard_texts=Execution.from_config(snakemake.config).shard_texts,
            token_budget=snakemake.params.token_budget,
        )
    logging.getLogger("layerlaws").info("signature corpus: %s", counts)


run_logged(main, snakemake.log[0], snakemake.resources)
