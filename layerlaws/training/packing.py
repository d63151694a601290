"""A training corpus packed as it streams in, without torch: texts' token ids, each text
followed by the separator, cut into sequences of ``context`` tokens and appended to a
``.npy`` file, so that a whole source (a Pile subset of 6e10 tokens) is never in memory;
the training reads the file memory-mapped (``numpy.load(mmap_mode="r")``).
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass
from typing import BinaryIO

import numpy as np

from layerlaws.core.errors import LayerlawsError
from layerlaws.training.plan import token_stream

BATCH_CHARACTERS = 2**24
"""Characters of text tokenised at once at most (a text longer is tokenised alone): the
tokenizer holds a few hundred bytes per token of a batch, about 1 GB for 16M characters
of English."""


def text_batches(texts: Iterable[str], max_texts: int) -> Iterator[list[str]]:
    """``texts`` in order, in batches of at most ``max_texts`` texts and BATCH_CHARACTERS
    characters (one text at least), so that tokenising a batch holds a bounded memory
    whatever the documents' lengths (an ArXiv paper runs to 10⁵ tokens)."""
    batch: list[str] = []
    characters = 0
    for text in texts:
        if batch and (len(batch) == max_texts or characters + len(text) > BATCH_CHARACTERS):
            yield batch
            batch, characters = [], 0
        batch.append(text)
        characters += len(text)
    if batch:
        yield batch


def sequence_dtype(vocab_size: int) -> np.dtype:
    """The smallest unsigned integer type of every token id of a vocabulary of
    ``vocab_size``: uint16 up to 65,536 tokens (SmolLM2's 49,152), else uint32 (Qwen2.5's
    151,665): a quarter or half of int64's disk."""
    return np.dtype(np.uint16 if vocab_size <= 2**16 else np.uint32)


@dataclass(frozen=True)
class PackedFacts:
    """What a ``PackedWriter`` wrote."""

    texts: int
    """Texts read (the last one possibly in part, when a limit stopped the writing)."""
    sequences: int
    counts: np.ndarray
    """(vocab,) int64: how often each token id occurs in the written sequences."""

    @property
    def tokens(self) -> int:
        return int(self.counts.sum())


class PackedWriter:
    """Appends texts' token ids, packed as ``plan.pack_sequences`` packs them (each text
    followed by ``separator_id``, cut into rows of ``context`` tokens, the incomplete
    tail dropped at the end), to the ``.npy`` file open for writing as ``handle``, as
    ``sequence_dtype(vocab_size)``; with ``limit``, no more than that many sequences. The
    header, written first for 0 rows, is rewritten with the count by ``finish`` (NumPy's
    header keeps room for the first dimension to grow)."""

    def __init__(
        self,
        handle: BinaryIO,
        context: int,
        separator_id: int,
        vocab_size: int,
        limit: int | None = None,
    ) -> None:
        self.handle, self.context, self.separator_id = handle, context, separator_id
        self.vocab_size, self.limit = vocab_size, limit
        self.dtype = sequence_dtype(vocab_size)
        self.pending = np.empty(0, dtype=np.int64)
        self.counts = np.zeros(vocab_size, dtype=np.int64)
        self.texts = self.sequences = 0
        self.data_offset = self._write_header()

    def _write_header(self) -> int:
        """Write the header for the sequences written so far at the start of the file;
        its length."""
        self.handle.seek(0)
        header = {
            "descr": np.lib.format.dtype_to_descr(self.dtype),
            "fortran_order": False,
            "shape": (self.sequences, self.context),
        }
        np.lib.format.write_array_header_1_0(self.handle, header)
        return self.handle.tell()

    @property
    def wants_more(self) -> bool:
        """Whether more sequences are wanted (no limit, or fewer written)."""
        return self.limit is None or self.sequences < self.limit

    def add(self, texts: Sequence[Sequence[int]]) -> bool:
        """Pack ``texts`` (token ids) and write their complete sequences (up to the
        limit); whether more are wanted. Raises LayerlawsError for an id outside the
        vocabulary."""
        stream = np.concatenate([self.pending, token_stream(texts, self.separator_id)])
        if len(stream) and (stream.min() < 0 or stream.max() >= self.vocab_size):
            raise LayerlawsError(
                f"a token id of the training corpus lies outside the tokenizer's vocabulary "
                f"of {self.vocab_size:,} (ids {stream.min()} to {stream.max()})"
            )
        rows = len(stream) // self.context
        if self.limit is not None:
            rows = min(rows, self.limit - self.sequences)
        block = stream[: rows * self.context]
        self.handle.write(block.astype(self.dtype).tobytes())
        self.counts += np.bincount(block, minlength=self.vocab_size)
        self.pending = stream[rows * self.context :]
        self.texts += len(texts)
        self.sequences += rows
        return self.wants_more

    def finish(self) -> PackedFacts:
        """Rewrite the header with the sequences written; what was written."""
        end = self.handle.tell()
        if self._write_header() != self.data_offset:
            raise LayerlawsError("the packed corpus's header changed length; cannot finish it")
        self.handle.seek(end)
        return PackedFacts(self.texts, self.sequences, self.counts)
