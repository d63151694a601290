"""How much text each token spells, in UTF-8 bytes and in characters, whatever the
tokenizer: byte-level BPE (a token may hold part of a character), SentencePiece (``▁``)
or WordPiece (``##``); and a fingerprint of a tokenizer's vocabulary.

A sequence's text is what its text tokens decode to (``tokenizer.decode``, special tokens
skipped), the text they spell. Token i's span is the part of that text first reached when
it is appended: with A(k) the number of leading characters on which decode(ids[:j])
agrees with the whole text for some j ≤ k, token i spans the characters A(i+1) − A(i)
and their UTF-8 bytes. The spans of a sequence sum to its whole text, and a character
split over several byte-level tokens belongs to the token that completes it (the earlier
pieces decode to a replacement character, which the text does not agree with). The
whitespace between two words belongs to the token after it, as the tokenizers mark it.
"""

from __future__ import annotations

import hashlib
import json
from typing import Any

import numpy as np
import polars as pl

SPAN_SCHEMA = {
    "sentence_id": pl.Int64,
    "position": pl.Int32,
    "n_bytes": pl.Int64,
    "n_characters": pl.Int64,
}


def _agreement(prefix: str, text: str) -> int:
    """The number of leading characters ``prefix`` and ``text`` share."""
    if text.startswith(prefix):
        return len(prefix)
    differing = (i for i, (a, b) in enumerate(zip(prefix, text, strict=False)) if a != b)
    return next(differing, min(len(prefix), len(text)))


def sequence_spans(ids: list[int], tokenizer: Any) -> tuple[np.ndarray, np.ndarray]:
    """(bytes, characters), each (len(ids),) int64: the span of every token of one
    sequence (see the module's docstring). Decodes every prefix: O(T²) tokens for T ids."""
    if not ids:
        return np.zeros(0, dtype=np.int64), np.zeros(0, dtype=np.int64)
    prefixes = tokenizer.batch_decode(
        [ids[: k + 1] for k in range(len(ids))], skip_special_tokens=True
    )
    text = prefixes[-1]
    agreed = np.maximum.accumulate([_agreement(prefix, text) for prefix in prefixes])
    character_ends = np.concatenate([[0], agreed]).astype(np.int64)
    byte_ends = np.concatenate([[0], np.cumsum([len(c.encode("utf-8")) for c in text])])
    return np.diff(byte_ends[character_ends]).astype(np.int64), np.diff(character_ends)


def token_spans(tokens: pl.DataFrame, tokenizer: Any) -> pl.DataFrame:
    """The span of every text token of a tokens table (``layerlaws.text.tokens``; its
    special tokens are left out of the decoded text): ``sentence_id``, ``position``,
    ``n_bytes``, ``n_characters``."""
    text = tokens.filter(~pl.col("is_special")).sort(["sentence_id", "position"])
    n_bytes, n_characters = [], []
    for _, part in text.group_by("sentence_id", maintain_order=True):
        spans = sequence_spans(part["token_id"].to_list(), tokenizer)
        n_bytes.append(spans[0])
        n_characters.append(spans[1])
    return pl.DataFrame(
        {
            "sentence_id": text["sentence_id"],
            "position": text["position"],
            "n_bytes": np.concatenate(n_bytes) if n_bytes else [],
            "n_characters": np.concatenate(n_characters) if n_characters else [],
        },
        schema=SPAN_SCHEMA,
    )


def tokenizer_fingerprint(tokenizer: Any) -> str:
    """The first 12 hexadecimal digits of the SHA-256 of the tokenizer's vocabulary, its
    (token, id) pairs sorted, as JSON: equal for tokenizers whose ids mean the same
    tokens."""
    vocabulary = sorted(tokenizer.get_vocab().items())
    encoded = json.dumps(vocabulary, ensure_ascii=False).encode("utf-8")
    return hashlib.sha256(encoded).hexdigest()[:12]
