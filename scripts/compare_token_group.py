"""Snakemake entry point: a chosen group of tokens in one signature run (Yao & Xu Fig. 12):
cos(W_E) and cos(φ_next) over the group and each token's most frequent next tokens."""

import logging

from layerlaws.core.atomic import write_csv
from layerlaws.core.logs import run_logged
from layerlaws.models.loading import embedding_matrices, load_tokenizer
from layerlaws.signatures.token_groups import (
    group_cosines,
    group_token_ids,
    next_tokens,
    successor_counts,
)


def main() -> None:
    params = snakemake.params
    tokenizer = load_tokenizer(snakemake.input.tokenizer)
    tokens = group_token_ids(params.tokens, tokenizer, params.where)
    bigrams = successor_counts(snakemake.input.bigrams, tokens)
    input_embeddings, _, _ = embedding_matrices(snakemake.input.model)
    cosines = group_cosines(bigrams, input_embeddings, tokens, params.tokens)
    following = next_tokens(bigrams, tokens, params.tokens, lambda token: tokenizer.decode([token]))
    absent = sorted(set(params.tokens) - set(following["text"]))
    if absent:
        logging.getLogger("layerlaws").warning(
            "%s never precede a text token in the counts: their φ_next cosines are NaN", absent
        )
    write_csv(snakemake.output.cosines, cosines)
    write_csv(snakemake.output.next_tokens, following)


run_logged(main, snakemake.log[0], snakemake.resources)
