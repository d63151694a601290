"""Snakemake entry point: tokenise sampled texts (results/tokens/{model}/{dataset}.parquet)."""

import polars as pl

from layerlaws.core.atomic import write_parquet
from layerlaws.core.logs import run_logged
from layerlaws.models.facts import read_facts
from layerlaws.models.loading import load_tokenizer
from layerlaws.text.tokens import tokenize_sentences


def main() -> None:
    params = snakemake.params
    tokens = tokenize_sentences(
        pl.read_parquet(snakemake.input.sentences),
        load_tokenizer(snakemake.input.model),
        max_tokens=params.max_tokens,
        min_tokens=params.min_tokens,
        token_budget=params.token_budget,
        too_long=params.too_long,
        max_positions=read_facts(snakemake.input.model).max_positions,
    )
    write_parquet(snakemake.output[0], tokens)


run_logged(main, snakemake.log[0], snakemake.resources)
