"""Tokenisation of the probing sentences into a long table of tokens.

``tokens.parquet`` columns: ``sentence_id`` (int64), ``position`` (int32, index in the
model's input sequence, 0-based, special tokens included), ``token_id`` (int64) and
``is_special`` (bool: a token the tokenizer added, such as BOS or EOS). Sequences are never
padded here; padding exists only inside an extraction batch and never enters a table.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable
from itertools import islice
from pathlib import Path
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


def _token_table(
    sentence_ids: list[int],
    encoded: Any,
    min_tokens: int,
    token_budget: int | None,
) -> tuple[pl.DataFrame, int, int]:
    """Token rows of encoded sentences: (table, sentences too short, text tokens kept).

    Sentences with fewer than ``min_tokens`` text tokens are skipped; with a
    ``token_budget``, sentences are taken in order until their text tokens reach it.
    """
    columns: dict[str, list[np.ndarray]] = {name: [] for name in TOKEN_SCHEMA}
    too_short = text_tokens = 0
    for sentence_id, ids, special in zip(
        sentence_ids, encoded["input_ids"], encoded["special_tokens_mask"], strict=True
    ):
        if token_budget is not None and text_tokens >= token_budget:
            break
        special_mask = np.asarray(special, dtype=bool)
        n_text = int((~special_mask).sum())
        if n_text < min_tokens:
            too_short += 1
            continue
        text_tokens += n_text
        columns["sentence_id"].append(np.full(len(ids), sentence_id, dtype=np.int64))
        columns["position"].append(np.arange(len(ids), dtype=np.int32))
        columns["token_id"].append(np.asarray(ids, dtype=np.int64))
        columns["is_special"].append(special_mask)
    table = pl.DataFrame(
        {name: np.concatenate(parts) if parts else [] for name, parts in columns.items()},
        schema=TOKEN_SCHEMA,
    )
    return table, too_short, text_tokens


def _encode(tokenizer: Any, texts: list[str], max_tokens: int | None) -> Any:
    return tokenizer(
        texts,
        add_special_tokens=True,
        truncation=max_tokens is not None,
        max_length=max_tokens,
        return_special_tokens_mask=True,
        return_attention_mask=False,
    )


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
    encoded = _encode(tokenizer, sentences["text"].to_list(), max_tokens)
    table, too_short, text_tokens = _token_table(
        sentences["sentence_id"].to_list(), encoded, min_tokens, token_budget
    )
    if too_short:
        log.warning(
            "dropped %d of %d texts with fewer than %d text tokens",
            too_short,
            len(sentences),
            min_tokens,
        )
    if table.is_empty():
        raise LayerlawsError(
            f"all {len(sentences)} texts have fewer than min_tokens={min_tokens} text tokens "
            f"after tokenisation; use longer texts or lower the dataset's min_tokens"
        )
    log.info("kept %d texts, %d text tokens", table["sentence_id"].n_unique(), text_tokens)
    return table


def shard_name(index: int) -> str:
    return f"shard_{index:05d}.parquet"


def tokenize_corpus(
    texts: Iterable[tuple[str, str]],
    tokenizer: Any,
    out_folder: str | Path,
    shard_texts: int,
    token_budget: int | None = None,
) -> dict[str, int]:
    """Tokenise a whole corpus, untruncated, into Parquet shards of ``shard_texts`` texts.

    Memory is bounded by one shard. Sentence ids run on across shards, so a sequence never
    spans two shards. With a ``token_budget``, stops once that many text tokens are
    written. Returns counts (texts, text tokens, shards); raises LayerlawsError when the
    corpus holds no text.
    """
    out = Path(out_folder)
    out.mkdir(parents=True, exist_ok=True)
    n_texts = n_tokens = n_shards = first_id = 0
    source = iter(texts)
    batch = list(islice(source, shard_texts))
    while batch and (token_budget is None or n_tokens < token_budget):
        remaining = None if token_budget is None else token_budget - n_tokens
        ids = list(range(first_id, first_id + len(batch)))
        first_id += len(batch)
        encoded = _encode(tokenizer, [text for text, _ in batch], None)
        table, _, written = _token_table(ids, encoded, 1, remaining)
        table.write_parquet(out / shard_name(n_shards))
        n_shards += 1
        n_texts += table["sentence_id"].n_unique()
        n_tokens += written
        log.info("shard %d: %d texts so far, %d text tokens", n_shards, n_texts, n_tokens)
        batch = list(islice(source, shard_texts))
    if n_tokens == 0:
        raise LayerlawsError(
            "the signature corpus is empty: it holds no text token; check the dataset's source"
        )
    return {"n_texts": n_texts, "n_text_tokens": n_tokens, "n_shards": n_shards}
