"""Tokenisation: the one policy by which texts become model inputs.

Probing texts, whole corpora and coupling prompts are all encoded here, with the
tokenizer's own special tokens (BOS, EOS) and one behaviour for texts longer than the
limit (``too_long``: ``truncate`` them, ``drop`` them, or stop with an ``error``). The
limit is ``max_tokens`` (special tokens counted), capped at the model's context with a
warning; whole corpora for the signatures are counted untruncated.

Token tables (``tokens.parquet`` and the corpus shards) have the columns ``sentence_id``
(int64), ``position`` (int32, index in the model's input sequence, 0-based, special tokens
included), ``token_id`` (int64) and ``is_special`` (bool: a token the tokenizer added).
Corpus shards also carry ``next_token_id`` (int64, null when none): the id of the next
token of the same sequence when both are text tokens, so that bigrams are counted by a
plain aggregation rather than a self-join.
Sequences are never padded here; padding exists only inside an extraction batch and never
enters a table.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable
from dataclasses import dataclass
from itertools import islice
from pathlib import Path
from typing import Any

import numpy as np
import polars as pl

from layerlaws.core.errors import LayerlawsError

log = logging.getLogger(__name__)

TOKEN_SCHEMA = {
    "sentence_id": pl.Int64,
    "position": pl.Int32,
    "token_id": pl.Int64,
    "is_special": pl.Boolean,
}


TOO_LONG = ("truncate", "drop", "error")
"""What to do with a text longer than the limit."""


def context_limit(max_tokens: int, max_positions: int | None) -> int:
    """``max_tokens``, capped (with a warning) at the model's context ``max_positions``."""
    if max_positions and max_tokens > max_positions:
        log.warning(
            "max_tokens %d exceeds the model's context of %d tokens; using %d",
            max_tokens,
            max_positions,
            max_positions,
        )
        return max_positions
    return max_tokens


@dataclass(frozen=True)
class Encoded:
    """Encoded texts: token ids and special-token masks of the ``kept`` texts, in order."""

    token_ids: list[list[int]]
    special: list[list[int]]
    kept: list[int]
    """Indices of the encoded texts among those given (all of them unless dropped)."""


def encode(tokenizer: Any, texts: list[str], max_tokens: int | None, too_long: str) -> Encoded:
    """Encode ``texts`` with their special tokens, at most ``max_tokens`` each (None: no
    limit); a longer text is truncated, dropped (with a warning) or an error, by
    ``too_long``."""
    if too_long not in TOO_LONG:
        raise LayerlawsError(f"too_long is {too_long!r}; allowed values: {list(TOO_LONG)}")
    truncate = max_tokens is not None and too_long == "truncate"
    encoded = tokenizer(
        texts,
        add_special_tokens=True,
        truncation=truncate,
        max_length=max_tokens if truncate else None,
        return_special_tokens_mask=True,
        return_attention_mask=False,
    )
    ids, special = encoded["input_ids"], encoded["special_tokens_mask"]
    kept = list(range(len(texts)))
    if max_tokens is not None and not truncate:
        longer = [i for i in kept if len(ids[i]) > max_tokens]
        if longer and too_long == "error":
            first = longer[0]
            raise LayerlawsError(
                f"{len(longer)} of {len(texts)} texts have more than max_tokens={max_tokens} "
                f"tokens, such as {texts[first][:60]!r}… ({len(ids[first])} tokens); raise "
                f"max_tokens, or set too_long to truncate or drop"
            )
        if longer:
            log.warning(
                "dropped %d of %d texts longer than %d tokens", len(longer), len(texts), max_tokens
            )
            kept = [i for i in kept if len(ids[i]) <= max_tokens]
    return Encoded([ids[i] for i in kept], [special[i] for i in kept], kept)


def _token_table(
    sentence_ids: list[int],
    encoded: Encoded,
    min_tokens: int,
    token_budget: int | None,
) -> tuple[pl.DataFrame, int, int]:
    """Token rows of the encoded sentences whose ids are ``sentence_ids`` (one per kept
    text): (table, sentences too short, text tokens kept).

    Sentences with fewer than ``min_tokens`` text tokens are skipped; with a
    ``token_budget``, sentences are taken in order until their text tokens reach it.
    """
    columns: dict[str, list[np.ndarray]] = {name: [] for name in TOKEN_SCHEMA}
    too_short = text_tokens = 0
    for sentence_id, ids, special in zip(
        sentence_ids, encoded.token_ids, encoded.special, strict=True
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


def _why_none_left(encoded: Encoded, texts: int, limit: int, min_tokens: int) -> str:
    """Why no text of ``texts`` kept enough text tokens, and the setting to change."""
    cut = sum(len(ids) == limit for ids in encoded.token_ids)
    if cut:
        return (
            f"max_tokens={limit} (special tokens counted) cut {cut} of them to fewer than "
            f"min_tokens={min_tokens} text tokens; raise the dataset's max_tokens"
        )
    dropped = texts - len(encoded.token_ids)
    return (
        f"{dropped} were dropped as longer than max_tokens={limit} and the other "
        f"{len(encoded.token_ids)} have fewer than min_tokens={min_tokens} text tokens; raise "
        "max_tokens (or set too_long: truncate), use longer texts or lower min_tokens"
    )


def tokenize_sentences(
    sentences: pl.DataFrame,
    tokenizer: Any,
    max_tokens: int,
    min_tokens: int = 2,
    token_budget: int | None = None,
    too_long: str = "truncate",
    max_positions: int | None = None,
) -> pl.DataFrame:
    """Tokenise each sentence on its own, at most ``max_tokens`` tokens (special tokens
    counted; capped at the model's context ``max_positions``), longer ones handled by
    ``too_long``.

    Sentences with fewer than ``min_tokens`` text (non-special) tokens are dropped. With a
    ``token_budget``, sentences are kept in sampled order until their text tokens reach the
    budget. Raises LayerlawsError when no sentence is left.
    """
    limit = context_limit(max_tokens, max_positions)
    encoded = encode(tokenizer, sentences["text"].to_list(), limit, too_long)
    sentence_ids = sentences["sentence_id"].to_list()
    table, too_short, text_tokens = _token_table(
        [sentence_ids[i] for i in encoded.kept], encoded, min_tokens, token_budget
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
            f"none of the {len(sentences)} texts is left after tokenisation: "
            + _why_none_left(encoded, len(sentences), limit, min_tokens)
        )
    log.info("kept %d texts, %d text tokens", table["sentence_id"].n_unique(), text_tokens)
    return table


def tokenize_prompts(
    texts: list[str],
    tokenizer: Any,
    max_tokens: int,
    too_long: str = "truncate",
    max_positions: int | None = None,
) -> tuple[list[list[int]], list[int]]:
    """Token ids of each prompt (special tokens included) under the same policy as
    ``tokenize_sentences``, and the index in ``texts`` of each (``too_long: drop`` leaves
    some out); every prompt left must have at least 2 tokens."""
    encoded = encode(tokenizer, texts, context_limit(max_tokens, max_positions), too_long)
    for index, ids in zip(encoded.kept, encoded.token_ids, strict=True):
        if len(ids) < 2:
            raise LayerlawsError(f"coupling prompt {texts[index]!r} has fewer than 2 tokens")
    if not encoded.token_ids:
        raise LayerlawsError("every coupling prompt was dropped as too long; raise max_tokens")
    return encoded.token_ids, encoded.kept


def with_successors(table: pl.DataFrame) -> pl.DataFrame:
    """``table`` (sorted by sentence, then position) with ``next_token_id``: the next
    token's id where it and this token are text tokens of the same sequence, else null."""
    sentence = table["sentence_id"].to_numpy()
    special = table["is_special"].to_numpy()
    token = table["token_id"].to_numpy()
    following = np.zeros(len(table), dtype=bool)
    following[:-1] = (sentence[1:] == sentence[:-1]) & ~special[1:] & ~special[:-1]
    successor = np.zeros(len(table), dtype=np.int64)
    successor[:-1] = token[1:]
    return table.with_columns(
        next_token_id=pl.Series(successor, dtype=pl.Int64).set(~pl.Series(following), None)
    )


PACKED_SHARD_TOKENS = 2**22
"""Token rows per shard of packed sequences (about 100 MB of table in memory)."""


def packed_token_shards(
    sequences: np.ndarray, separator_id: int, out_folder: str | Path
) -> dict[str, int]:
    """Write packed training ``sequences`` ((n, context) int64, texts joined by
    ``separator_id``) as token shards of about PACKED_SHARD_TOKENS tokens, in the layout
    ``tokenize_corpus`` writes: each sequence one sentence, the separator a special token,
    so a bigram is two text tokens that the training read side by side within one text.
    Returns counts (sequences, text tokens, shards); raises LayerlawsError when there is no
    sequence."""
    if len(sequences) == 0:
        raise LayerlawsError("the training corpus holds no packed sequence to count")
    out = Path(out_folder)
    out.mkdir(parents=True, exist_ok=True)
    n_sequences, context = sequences.shape
    shard_sequences = max(1, PACKED_SHARD_TOKENS // context)
    n_tokens = n_shards = 0
    for first in range(0, n_sequences, shard_sequences):
        part = sequences[first : first + shard_sequences]
        special = part.ravel() == separator_id
        table = pl.DataFrame(
            {
                "sentence_id": np.repeat(np.arange(first, first + len(part)), context),
                "position": np.tile(np.arange(context, dtype=np.int32), len(part)),
                "token_id": part.ravel(),
                "is_special": special,
            },
            schema=TOKEN_SCHEMA,
        )
        with_successors(table).write_parquet(out / shard_name(n_shards))
        n_shards += 1
        n_tokens += int((~special).sum())
    return {"n_sequences": n_sequences, "n_text_tokens": n_tokens, "n_shards": n_shards}


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
        encoded = encode(tokenizer, [text for text, _ in batch], None, "truncate")
        table, _, written = _token_table(ids, encoded, 1, remaining)
        with_successors(table).write_parquet(out / shard_name(n_shards))
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
