"""Chosen groups of tokens (Yao & Xu, Appendix C.3, Fig. 12): the cosine similarities of
their input embeddings W_E and of their next-token signatures φ_next, and the tokens that
most often follow each of them in the counted corpus.

A group is a few strings (``signatures.token_groups``), each one token of the model's
tokenizer. φ_next[s] is the distribution of the text token after s (the rows of
``signature_rows``); a token never followed by a text token in the corpus (Yao & Xu's
"/e", absent from DM Mathematics) has no φ_next, and its row and column of cos(φ_next)
are NaN. Cosines are computed and written in float64.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np
import polars as pl

from layerlaws.core.errors import LayerlawsError
from layerlaws.core.geometry import cosine_matrix
from layerlaws.signatures.comparison import signature_rows

NEXT_TOKENS = 5
"""The most frequent next tokens listed for each token of a group."""

COSINE_SCHEMA = {
    "matrix": pl.String,
    "row_token": pl.Int64,
    "row_text": pl.String,
    "column_token": pl.Int64,
    "column_text": pl.String,
    "cosine": pl.Float64,
}
"""The long-form cosine table: one row per (matrix, row token, column token)."""


def group_token_ids(texts: Sequence[str], tokenizer: Any, where: str) -> np.ndarray:
    """The vocabulary id of each string of a group, shape (len(texts),) int64. Each must
    be exactly one token of ``tokenizer`` (a Hugging Face tokenizer, encoded without
    special tokens), not its unknown token, and no two the same token; ``where`` (the
    config key) leads the error otherwise, which names the string's tokens."""
    ids = []
    for text in texts:
        encoded = tokenizer(text, add_special_tokens=False)["input_ids"]
        if len(encoded) != 1:
            pieces = [tokenizer.decode([token]) for token in encoded]
            raise LayerlawsError(
                f"config {where}: {text!r} is not one token of this model's tokenizer but "
                f"{len(encoded)}: {pieces}; write each token as the tokenizer decodes it "
                f"(one of these, or another spelling)"
            )
        if encoded[0] == tokenizer.unk_token_id:
            raise LayerlawsError(
                f"config {where}: {text!r} is not in this model's vocabulary (the tokenizer "
                f"encodes it as its unknown token); name a token of the vocabulary"
            )
        ids.append(int(encoded[0]))
    for first, token in enumerate(ids):
        if token in ids[:first]:
            raise LayerlawsError(
                f"config {where}: {texts[ids.index(token)]!r} and {texts[first]!r} are the "
                f"same token ({token}); name it once"
            )
    return np.array(ids, dtype=np.int64)


def successor_counts(bigrams: str | os.PathLike[str], tokens: np.ndarray) -> pl.DataFrame:
    """The rows of a ``bigrams.parquet`` (``token``, ``next_token``, ``count``) whose first
    token is one of ``tokens``, read with the filter pushed into the scan (the table of a
    whole corpus is never loaded)."""
    return pl.scan_parquet(bigrams).filter(pl.col("token").is_in(tokens.tolist())).collect()


def group_cosines(
    bigrams: pl.DataFrame,
    input_embeddings: np.ndarray,
    tokens: np.ndarray,
    texts: Sequence[str],
) -> pl.DataFrame:
    """cos(W_E) and cos(φ_next) over a group's ``tokens`` (their ``texts``, in the
    group's order), in long form (``COSINE_SCHEMA``): ``matrix`` ``W_E`` or ``next``, one
    row per (row token, column token). ``bigrams``: counted pairs (token, next_token,
    count), at least those whose first token is in the group; ``input_embeddings``: W_E,
    (V, d). A token without a next token in ``bigrams`` has NaN cosines in ``next``."""
    phi_next = signature_rows(bigrams, tokens, len(input_embeddings))["next"]
    present = np.asarray(phi_next.sum(axis=1)).ravel() > 0
    signature_cos = cosine_matrix(phi_next)
    signature_cos[~present, :] = np.nan
    signature_cos[:, ~present] = np.nan
    matrices = {"W_E": cosine_matrix(input_embeddings[tokens]), "next": signature_cos}
    rows, columns = np.divmod(np.arange(len(tokens) ** 2), len(tokens))
    labels = np.asarray(texts, dtype=object)
    return pl.concat(
        pl.DataFrame(
            {
                "matrix": name,
                "row_token": tokens[rows],
                "row_text": labels[rows],
                "column_token": tokens[columns],
                "column_text": labels[columns],
                "cosine": matrix.ravel(),
            },
            schema=COSINE_SCHEMA,
        )
        for name, matrix in matrices.items()
    )


def next_tokens(
    bigrams: pl.DataFrame,
    tokens: np.ndarray,
    texts: Sequence[str],
    decode: Callable[[int], str],
    count: int = NEXT_TOKENS,
) -> pl.DataFrame:
    """The ``count`` most frequent next tokens of each group token (ties: the smaller id
    first), in the group's order: ``token``, ``text``, ``rank`` (1 = most frequent),
    ``next_token``, ``next_text`` (``decode``), ``count`` (of the pair) and
    ``probability`` (φ_next[s] of it: the pair's share of the token's pairs). A token
    without a next token in ``bigrams`` has no rows."""
    order = pl.DataFrame({"token": tokens, "text": list(texts), "position": range(len(tokens))})
    ranked = (
        bigrams.join(order, on="token")
        .with_columns(
            (pl.col("count") / pl.col("count").sum().over("token")).alias("probability"),
        )
        .sort(["position", "count", "next_token"], descending=[False, True, False])
        .with_columns(pl.int_range(1, pl.len() + 1).over("token").alias("rank"))
        .filter(pl.col("rank") <= count)
    )
    next_texts = [decode(int(token)) for token in ranked["next_token"]]
    return ranked.select(
        "token",
        "text",
        pl.col("rank").cast(pl.Int64),
        "next_token",
        pl.Series("next_text", next_texts, dtype=pl.String),
        "count",
        "probability",
    )
