"""Snakemake entry point: tokenise a whole corpus into shards (results/signatures/…/shards)."""

import logging

from layerlaws.atomic import atomic_path
from layerlaws.corpus import excluded_sources
from layerlaws.execution import Execution
from layerlaws.logs import run_logged
from layerlaws.models import load_tokenizer
from layerlaws.sources import iter_texts
from layerlaws.tokens import tokenize_corpus


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


run_logged(main, snakemake.log[0])
