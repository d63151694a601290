"""Snakemake entry point: tokenise sampled texts (results/tokens/{model}/{dataset}.parquet)."""

import logging

import polars as pl

from layerlaws.atomic import write_parquet
from layerlaws.logs import run_logged
from layerlaws.models import load_tokenizer, read_facts
from layerlaws.tokens import tokenize_sentences


def main() -> None:
    log = logging.getLogger("layerlaws")
    facts = read_facts(snakemake.input.model)
    max_tokens = snakemake.params.max_tokens
    if facts.max_positions and max_tokens > facts.max_positions:
        log.warning(
            "max_tokens %d exceeds the model's %d positions; truncating to %d",
            max_tokens,
            facts.max_positions,
            facts.max_positions,
        )
        max_tokens = facts.max_positions
    tokens = tokenize_sentences(
        pl.read_parquet(snakemake.input.sentences),
        load_tokenizer(snakemake.input.model),
        max_tokens=max_tokens,
        min_tokens=snakemake.params.min_tokens,
        token_budget=snakemake.params.token_budget,
    )
    write_parquet(snakemake.output[0], tokens)


run_logged(main, snakemake.log[0])
