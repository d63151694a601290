"""Held-out evaluation of a model on a probing dataset, from the logits of the same forward
pass that gathers the equi-learning statistics.

The predictions counted are those of the regression rows of the probe's target offset:
+1 for next-token probing (every text token whose next position holds a text token of the
same sequence; special tokens are neither inputs nor targets), 0 for masked-LM probing
(the masked positions, predicting their original token). Loss is the mean cross-entropy
in nats, accumulated in float64; perplexity is exp(loss); accuracy the share of
predictions whose largest logit is the target.
"""

from __future__ import annotations

import math
from typing import Any

import polars as pl
import torch

from layerlaws.equilearning.statistics import target_ids


class HeldOutEvaluation:
    """A logit observer of ``layerlaws.forward.model_pass.run_forward_pass``."""

    def __init__(self, target_offset: int = 1) -> None:
        self.target_offset = target_offset
        self.loss_sum = 0.0
        self.correct = 0
        self.count = 0
        self._targets = torch.empty(0, dtype=torch.long)
        self._defined = torch.empty(0, dtype=torch.bool)

    def begin_batch(self, batch: Any) -> None:
        """The rows (text tokens) the next logits belong to."""
        ids, defined = target_ids(batch.rows, [self.target_offset])
        self._targets = torch.from_numpy(ids[:, 0])
        self._defined = torch.from_numpy(defined[:, 0])

    def observe_logits(self, logits: torch.Tensor) -> None:
        """Logits (n_text, vocab_size) of the batch's text tokens, in row order."""
        where = logits.device
        defined = self._defined.to(where)
        predicted = logits[defined].float()
        targets = self._targets.to(where)[defined]
        loss = torch.nn.functional.cross_entropy(predicted, targets, reduction="none")
        self.loss_sum += float(loss.double().sum())
        self.correct += int((predicted.argmax(dim=1) == targets).sum())
        self.count += int(defined.sum())

    def table(self) -> pl.DataFrame:
        """One row: ``n_predictions``, ``loss`` (nats), ``perplexity``, ``accuracy``."""
        loss = self.loss_sum / self.count if self.count else float("nan")
        return pl.DataFrame(
            {
                "n_predictions": [self.count],
                "loss": [loss],
                "perplexity": [math.exp(loss)],
                "accuracy": [self.correct / self.count if self.count else float("nan")],
            }
        )
