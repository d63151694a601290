"""Snakemake entry point: signatures against embedding geometry (results/signatures/…)."""

import logging

import numpy as np
import polars as pl

from layerlaws.atomic import atomic_path, write_csv, write_json, write_parquet
from layerlaws.errors import LayerlawsError
from layerlaws.logs import run_logged
from layerlaws.models import embedding_matrices, load_tokenizer
from layerlaws.signatures import (
    analysis_tokens,
    compare,
    cosine_matrix,
    signature_rows,
    similarity_views,
)


def main() -> None:
    log = logging.getLogger("layerlaws")
    unigrams = pl.read_parquet(snakemake.input.unigrams)
    bigrams = pl.read_parquet(snakemake.input.bigrams)
    input_embeddings, output_embeddings, tied = embedding_matrices(snakemake.input.model)
    tokens = analysis_tokens(unigrams, bigrams, snakemake.params.top_tokens)
    nonzero = (np.abs(input_embeddings[tokens]).sum(1) > 0) & (
        np.abs(output_embeddings[tokens]).sum(1) > 0
    )
    tokens = tokens[nonzero]
    if len(tokens) < 3:
        raise LayerlawsError(
            f"only {len(tokens)} tokens have both a next and a previous token in the corpus; "
            f"count a larger corpus"
        )
    log.info("comparing %d tokens (tied embeddings: %s)", len(tokens), tied)
    tokenizer = load_tokenizer(snakemake.input.model)
    labels = [tokenizer.decode([int(token)]) for token in tokens]
    signature_cos = {
        name: cosine_matrix(rows)
        for name, rows in signature_rows(bigrams, tokens, len(input_embeddings)).items()
    }
    embedding_cos = {"W_E": cosine_matrix(input_embeddings[tokens])}
    embedding_cos["W_U"] = (
        embedding_cos["W_E"] if tied else cosine_matrix(output_embeddings[tokens])
    )
    rcos, per_token, deciles = compare(embedding_cos, signature_cos, tokens, labels)
    log.info("R_cos:\n%s", rcos)
    write_csv(snakemake.output.rcos, rcos)
    write_parquet(snakemake.output.per_token, per_token)
    write_csv(snakemake.output.percentiles, deciles)
    with atomic_path(snakemake.output.views) as temporary, open(temporary, "wb") as handle:
        np.savez(handle, **similarity_views({**embedding_cos, **signature_cos}, labels))
    write_json(
        snakemake.output.summary,
        {
            "tied_embeddings": tied,
            "n_tokens": len(tokens),
            "top_tokens": snakemake.params.top_tokens,
            "corpus_text_tokens": int(unigrams["count"].sum()),
            "distinct_tokens": len(unigrams),
            "bigrams": int(bigrams["count"].sum()),
            "distinct_bigrams": len(bigrams),
        },
    )


run_logged(main, snakemake.log[0])
