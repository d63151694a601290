"""Tokenisation of the probing sentences into a long table of tokens.

``tokens.parquet`` columns: ``sentence_id`` (int64), ``position`` (int32, index in the
model's input sequence, 0-based, special tokens included), ``token_id`` (int64) and
``is_special`` (bool: a token the tokenizer added, such as BOS or EOS). Sequences are never
padded here; padding exists only inside an extraction batch and never enters a table.
"""

from __future__ import annotations

import logging
from typing import Any

import numpy as np
import polars as pl

from layerlaws.errors import LayerlawsError

log = logging.getLogger(__name__)

TOKEN_SCHEMA = {
    "sentence_id": pl.Int64,
    "position": pl.Int32,
    "token_id": pl.Int64,
    "is_special": pl.Boolean,
}


def tokenize_sentences(
    sentences: pl.DataFrame,
    tokenizer: Any,
    max_tokens: int,
    min_tokens: int = 2,
    token_budget: int | None = None,
) -> pl.DataFrame:
    """Tokenise each sentence on its own, truncated to ``max_tokens`` (special tokens counted).

    Sentences with fewer than ``min_tokens`` text (non-special) tokens are dropped. With a
    ``token_budget``, sentences are kept in sampled order until their text tokens reach the
    budget. Raises LayerlawsError when no sentence is left.
    """
    encoded = tokenizer(
        sentences["text"].to_list(),
        add_special_tokens=True,
        truncation=True,
        max_length=max_tokens,
        return_special_tokens_mask=True,
        return_attention_mask=False,
    )
    columns: dict[str, list[np.ndarray]] = {name: [] for name in TOKEN_SCHEMA}
    kept = too_short = text_tokens = 0
    for sentence_id, ids, special in zip(
        sentences["sentence_id"].to_list(),
        encoded["input_ids"],
        encoded["special_tokens_mask"],
        strict=True,
    ):
        if token_budget is not None and text_tokens >= token_budget:
            break
        special_mask = np.asarray(special, dtype=bool)
        n_text = int((~special_mask).sum())
        if n_text < min_tokens:
            too_short += 1
            continue
        kept += 1
        text_tokens += n_text
        columns["sentence_id"].append(np.full(len(ids), sentence_id, dtype=np.int64))
        columns["position"].append(np.arange(len(ids), dtype=np.int32))
        columns["token_id"].append(np.asarray(ids, dtype=np.int64))
        columns["is_special"].append(special_mask)
    if too_short:
        log.warning(
            "dropped %d of %d texts with fewer than %d text tokens",
            too_short,
            len(sentences),
            min_tokens,
        )
    if kept == 0:
        raise LayerlawsError(
            f"all {len(sentences)} texts have fewer than min_tokens={min_tokens} text tokens "
            f"after tokenisation; use longer texts or lower the dataset's min_tokens"
        )
    log.info("kept %d texts, %d text tokens", kept, text_tokens)
    return pl.DataFrame(
        {name: np.concatenate(parts) for name, parts in columns.items()}, schema=TOKEN_SCHEMA
    )
