"""A training as workflow jobs, without torch: the corpus packed once, one job per segment
(``plan.segment_ends``: up to each checkpoint, then to the last step, and every
``segment_steps``) that writes a record of the step it reached, and the training's curve,
checkpoint table and summary combined from those records.

Each segment goes on from the checkpoint or resume point its predecessor saved (weights and
AdamW state), so the combined curve and checkpoints are those of one uninterrupted run,
while the checkpoints saved early are measured as the training goes on.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from layerlaws.training.plan import (
    TrainingSpec,
    previous_segment_end,
    unigram_cross_entropy,
    unigram_entropy,
)

CURVE_COLUMNS = ("step", "tokens_seen", "learning_rate", "train_loss", "held_out_loss")
"""The columns of a training's curve.csv, in order."""
CHECKPOINT_COLUMNS = ("step", "tokens_seen", "train_loss", "held_out_loss")
"""The columns of a training's checkpoints.csv, in order."""


def corpus_facts(
    texts: int, sequences: int, counts: np.ndarray, held_out: np.ndarray
) -> dict[str, Any]:
    """What training.json says of the packed corpus: ``texts`` packed into ``sequences``
    packed sequences, their token count and unigram entropy (nats) from the token
    ``counts`` (vocab,), the ``held_out`` sequences (m, context; m may be 0) and the
    add-one unigram model's loss on them (nats; None without held-out sequences)."""
    return {
        "texts": texts,
        "sequences": sequences,
        "corpus_tokens": int(counts.sum()),
        "unigram_entropy": unigram_entropy(counts),
        "held_out_sequences": len(held_out),
        "held_out_unigram_loss": (
            unigram_cross_entropy(counts, held_out) if len(held_out) else None
        ),
    }


def segment_record(
    spec: TrainingSpec,
    curve: Sequence[Mapping[str, Any]],
    end: int,
    *,
    resumed_from: int | None,
    seconds: float,
    device: str,
    n_sequences: int | None = None,
) -> dict[str, Any]:
    """The record of the segment that reached step ``end``: the curve's row at ``end``
    (step, tokens seen, learning rate, losses in nats), its own rows of the run's
    ``curve`` (after the previous segment end, up to ``end``), the step its job resumed
    from (None: from scratch), its ``seconds``, the tokens it trained on (of a corpus of
    ``n_sequences`` packed sequences; ``TrainingSpec.tokens_seen``) and its ``device``."""
    first = previous_segment_end(spec, end)
    after = -1 if first is None else first
    rows = [dict(row) for row in curve if after < row["step"] <= end]
    return {
        **rows[-1],
        "resumed_from_step": resumed_from,
        "seconds": round(seconds, 3),
        "trained_tokens": spec.tokens_seen(end, n_sequences)
        - spec.tokens_seen(resumed_from or 0, n_sequences),
        "device": device,
        "curve": rows,
    }


def training_curve(records: Sequence[Mapping[str, Any]]) -> list[dict[str, Any]]:
    """The whole run's curve: the records' rows (records in step order), CURVE_COLUMNS in
    order."""
    return [{name: row[name] for name in CURVE_COLUMNS} for rec in records for row in rec["curve"]]


def checkpoint_rows(spec: TrainingSpec, curve: Sequence[Mapping[str, Any]]) -> list[dict[str, Any]]:
    """The curve's rows at the checkpoints, CHECKPOINT_COLUMNS in order (the losses a
    checkpoint records are those of its step's row)."""
    return [
        {name: row[name] for name in CHECKPOINT_COLUMNS}
        for row in curve
        if row["step"] in spec.checkpoints
    ]


def training_summary(
    records: Sequence[Mapping[str, Any]], corpus: Mapping[str, Any]
) -> dict[str, Any]:
    """training.json: the ``corpus_facts``, and over the segments' ``records``:
    ``resumed_from_step``, the step the last segment's job went on from (the previous
    segment end in a run that went through, its own end when it found its checkpoint
    saved, None when it trained from scratch); ``seconds``, the segments' seconds summed;
    ``tokens_per_second``, the tokens they trained on over those seconds; ``device``, the
    devices they ran on."""
    seconds = sum(record["seconds"] for record in records)
    tokens = sum(record["trained_tokens"] for record in records)
    return {
        **corpus,
        "resumed_from_step": records[-1]["resumed_from_step"],
        "seconds": round(seconds, 3),
        "tokens_per_second": round(tokens / seconds, 1) if seconds > 0 else 0.0,
        "device": ", ".join(dict.fromkeys(record["device"] for record in records)),
    }
