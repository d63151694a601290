"""Held-out evaluation of a model on a probing dataset, from the logits of the same forward
pass that gathers the equi-learning statistics.

The predictions counted are those of the regression rows of the probe's target offset:
+1 for next-token probing (every text token whose next position holds a text token of the
same sequence; special tokens are neither inputs nor targets), 0 for masked-LM probing
(the masked positions, predicting their original token). Loss is the mean cross-entropy
in nats, accumulated in float64; perplexity is exp(loss); accuracy the share of
predictions whose largest logit is the target.

Loss per token depends on the tokenizer; bits per byte does not. ``bits_per_byte`` is the
summed cross-entropy of the predictions counted (nats) / ln 2 / the UTF-8 bytes of the
text their target tokens spell (``n_bytes``: the sum of the targets' spans,
``layerlaws.text.spans``: of a next-token sequence, its whole decoded text but the first
token's span, which is never predicted; under masked-LM probing, the masked tokens'
spans); ``bits_per_character`` the same per character (``n_characters``). ``tokenizer``
is the fingerprint of the tokenizer's vocabulary (``layerlaws.text.spans``), so that a
summary knows which models share one.

A model whose logits mean nothing (an encoder saved without its masked-LM head) is
skipped by leaving the evaluation out of the pass's logit observers: its table is then
one row with ``n_predictions`` 0 and every measure NaN.
"""

from __future__ import annotations

import math
from typing import Any

import polars as pl
import torch

from layerlaws.equilearning.statistics import target_ids


class HeldOutEvaluation:
    """A logit observer of ``layerlaws.forward.model_pass.run_forward_pass``.

    ``spans`` (``layerlaws.text.spans.token_spans`` of the pass's tokens table) gives the
    bytes and characters of each target; without it, those columns and the bits per byte
    and per character are null. ``tokenizer`` is the tokenizer's fingerprint."""

    progress_attributes = ("loss_sum", "correct", "count", "n_bytes", "n_characters")

    def __init__(
        self,
        target_offset: int = 1,
        spans: pl.DataFrame | None = None,
        tokenizer: str | None = None,
    ) -> None:
        self.target_offset = target_offset
        self.spans = spans
        self.tokenizer = tokenizer
        self.loss_sum = 0.0
        self.correct = 0
        self.count = 0
        self.n_bytes = 0
        self.n_characters = 0
        self._targets = torch.empty(0, dtype=torch.long)
        self._defined = torch.empty(0, dtype=torch.bool)
        self._target_spans = torch.zeros((0, 2), dtype=torch.long)

    def begin_batch(self, batch: Any) -> None:
        """The rows (text tokens) the next logits belong to, and their targets' spans."""
        ids, defined = target_ids(batch.rows, [self.target_offset])
        self._targets = torch.from_numpy(ids[:, 0])
        self._defined = torch.from_numpy(defined[:, 0])
        if self.spans is not None:
            targets = batch.rows.select(
                "sentence_id", pl.col("position") + self.target_offset
            ).join(self.spans, on=["sentence_id", "position"], how="left", maintain_order="left")
            spans = targets.select("n_bytes", "n_characters").fill_null(0).to_numpy()
            self._target_spans = torch.from_numpy(spans.astype("int64"))

    def observe_logits(self, logits: torch.Tensor) -> None:
        """Logits (n_text, vocab_size) of the batch's text tokens, in row order."""
        where = logits.device
        defined = self._defined.to(where)
        predicted = logits[defined].float()
        targets = self._targets.to(where)[defined]
        loss = torch.nn.functional.cross_entropy(predicted, targets, reduction="none")
        loss_sum = float(loss.double().sum())
        correct = int((predicted.argmax(dim=1) == targets).sum())
        if self.spans is not None:
            n_bytes, n_characters = self._target_spans[self._defined].sum(dim=0).tolist()
            self.n_bytes += n_bytes
            self.n_characters += n_characters
        self.loss_sum += loss_sum
        self.correct += correct
        self.count += int(self._defined.sum())

    def merge_(self, other: HeldOutEvaluation) -> None:
        """Add the sums of ``other`` (another shard's evaluation)."""
        for name in self.progress_attributes:
            setattr(self, name, getattr(self, name) + getattr(other, name))

    def _bits_per(self, units: int) -> float | None:
        if self.spans is None:
            return None
        return self.loss_sum / math.log(2) / units if units else float("nan")

    def table(self) -> pl.DataFrame:
        """One row: ``n_predictions``, ``n_bytes``, ``n_characters``, ``loss`` (nats per
        prediction), ``perplexity``, ``accuracy``, ``bits_per_byte``,
        ``bits_per_character``, ``tokenizer``."""
        loss = self.loss_sum / self.count if self.count else float("nan")
        spanned = self.spans is not None
        return pl.DataFrame(
            {
                "n_predictions": [self.count],
                "n_bytes": [self.n_bytes if spanned else None],
                "n_characters": [self.n_characters if spanned else None],
                "loss": [loss],
                "perplexity": [math.exp(loss)],
                "accuracy": [self.correct / self.count if self.count else float("nan")],
                "bits_per_byte": [self._bits_per(self.n_bytes)],
                "bits_per_character": [self._bits_per(self.n_characters)],
                "tokenizer": [self.tokenizer],
            },
            schema_overrides={
                "n_bytes": pl.Int64,
                "n_characters": pl.Int64,
                "bits_per_byte": pl.Float64,
                "bits_per_character": pl.Float64,
                "tokenizer": pl.String,
            },
        )
