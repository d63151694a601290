"""Snakemake entry point: signatures against embedding geometry (results/signatures/…)."""

import logging

import polars as pl

from layerlaws.core.atomic import write_csv, write_json, write_npz, write_parquet
from layerlaws.core.logs import run_logged
from layerlaws.models.loading import embedding_matrices, load_tokenizer
from layerlaws.signatures.comparison import compare_with_embeddings
from layerlaws.signatures.settings import SignatureSettings


def main() -> None:
    input_embeddings, output_embeddings, tied = embedding_matrices(snakemake.input.model)
    tokenizer = load_tokenizer(snakemake.input.model)
    result = compare_with_embeddings(
        pl.read_parquet(snakemake.input.unigrams),
        pl.read_parquet(snakemake.input.bigrams),
        input_embeddings=input_embeddings,
        output_embeddings=output_embeddings,
        tied=tied,
        decode=lambda token: tokenizer.decode([token]),
        settings=SignatureSettings.from_params(snakemake.params),
    )
    logging.getLogger("layerlaws").info("%s\nR_cos:\n%s", result.summary, result.rcos)
    write_csv(snakemake.output.rcos, result.rcos)
    write_parquet(snakemake.output.per_token, result.per_token)
    write_csv(snakemake.output.percentiles, result.percentiles)
    write_csv(snakemake.output.percentile_bins, result.percentile_bins)
    write_npz(snakemake.output.views, result.views)
    write_json(snakemake.output.summary, result.summary)


run_logged(main, snakemake.log[0], snakemake.resources)
