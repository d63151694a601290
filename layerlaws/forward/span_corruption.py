"""Probing an encoder–decoder (T5; He & Su, Fig. 7): the inputs of its two stacks.

Two layouts (``equilearning.encoder_decoder``). ``one_stack``, He & Su's released code
(the default): next-token probing regresses the encoder's states alone, on the text as a
causal model's table (``layerlaws.forward.masking.probe_tokens``: no table of this
module), and span corruption the decoder's states alone, the decoder reading its target
itself, each text token corrupted independently (below). ``encoder_then_decoder``: both
stacks' layers as one series, on the tables below.

An encoder–decoder's pass reads a table of two kinds of rows per sequence (both with
``is_encoder``):

- the encoder's input (``is_encoder`` true), never observed (always ``is_special``): its
  ``input_id`` at each encoder ``position``;
- the decoder's rows (``is_encoder`` false): ``token_id`` the token at each decoder
  ``position``, ``input_id`` what the decoder reads there, and ``encoder_position``, where
  the row's encoder-layer states are read.

Every layer thus has the same rows, the decoder's observed positions: decoder layers at
the row's own position, encoder layers (0..L_e, ``layerlaws.models.architectures``) at its
``encoder_position``. Targets are read from the decoder rows' ``token_id`` at offsets
along the decoder's positions, as for any table.

Two probes:

- ``next_token``: the encoder reads the text as tokenised (T5's EOS last), and the
  decoder reads the model's decoder start token, then the same text (teacher forcing on
  the text as T5's target): the row of text token t is the decoder's position t + 1,
  where it has read tokens 0..t, and the encoder's position t, so offset +1 is the next
  token (what T5's decoder predicts there) and offset 0 the token just read, as for a
  causal model. The start token's position is never a row.
- ``span_corruption`` (Raffel et al. 2020, §3.1.4; their ``random_spans_noise_mask``;
  the decoder reads its target shifted right after the start token, as T5 is trained):
  of a sequence's n text tokens, round(n · ``rate``) are noise (clamped to 1..n − 1), in
  round(noise / 3) spans (mean span length 3; at least 1, at most as many as there are
  noise and kept tokens), the noise and kept tokens each cut into that many runs of
  positive length at uniformly drawn cut points, alternating kept, noise, kept, …, noise.
  The encoder reads the text with span k replaced by one sentinel ``<extra_id_k>``
  (special tokens stay where they are); the decoder's target is ``<extra_id_0>`` span 0
  ``<extra_id_1>`` span 1 … then EOS. Rows: the target's sentinels and span tokens; the
  final EOS is a row only under ``special_tokens: include``. Offset 0 is the token the
  decoder predicts at the row's position (its own task, like masked-LM's offset 0). A
  row's encoder position is that of the sentinel standing for its span (sentinel k and
  the tokens of span k: the encoder's sentinel k), the EOS's the encoder's last position
  (its own EOS). ``rate`` and ``seed`` are ``equilearning.masking``'s (0.15, T5's noise
  density, by default); draws come from one NumPy generator seeded by ``seed``, sequence
  by sequence in sentence order: the same table and seed give the same spans. A sequence
  of fewer than two text tokens has no spans: it is left out (logged).
- ``span_corruption`` under ``one_stack`` (He & Su's released ``corrupt_text`` and
  ``get_features_only_sc``): each text token is corrupted independently with probability
  ``rate``, and each run of corrupted tokens is one span, replaced by one sentinel in the
  encoder's input; the target is built as above. The decoder reads the target itself
  (no start token), all but its last token: the row at decoder position p has read
  target tokens 0..p, and its ``token_id`` is target token p + 1, so that offset 0 is the
  next target token, the one the released code regresses the decoder's state on (and the
  one T5's decoder predicts there), and offset −1 the token just read. The first target
  token (``<extra_id_0>``) is read but never a target. A sequence with no corrupted token
  is left out (logged).
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import polars as pl

from layerlaws.core.errors import LayerlawsError
from layerlaws.models.architectures import is_encoder_decoder
from layerlaws.models.facts import read_facts
from layerlaws.models.loading import decoder_start_token_id

log = logging.getLogger(__name__)

MEAN_SPAN_LENGTH = 3.0
"""Raffel et al.'s mean length of a corrupted span (§3.1.4)."""
SENTINEL = "<extra_id_{}>"
"""T5's sentinel tokens, numbered from 0."""
ENCODER_DECODER_PROBES = ("next_token", "span_corruption")

TABLE_SCHEMA = {
    "sentence_id": pl.Int64,
    "position": pl.Int32,
    "token_id": pl.Int64,
    "is_special": pl.Boolean,
    "input_id": pl.Int64,
    "is_target": pl.Boolean,
    "is_encoder": pl.Boolean,
    "encoder_position": pl.Int32,
}
"""Columns of an encoder–decoder table."""


@dataclass(frozen=True)
class Seq2SeqVocabulary:
    """The ids an encoder–decoder's inputs are built of."""

    decoder_start_id: int
    """What the decoder reads first (T5: the pad token)."""
    eos_id: int | None
    """The end of the decoder's target (None: the tokenizer has no EOS)."""
    sentinel_ids: tuple[int, ...]
    """``<extra_id_0>``, ``<extra_id_1>``, … (empty: the tokenizer has none)."""

    @classmethod
    def of(cls, tokenizer: Any, decoder_start_id: int) -> Seq2SeqVocabulary:
        """The vocabulary of ``tokenizer`` (its sentinels the consecutive
        ``<extra_id_k>`` from k = 0 it holds)."""
        vocabulary = tokenizer.get_vocab()
        sentinels: list[int] = []
        while SENTINEL.format(len(sentinels)) in vocabulary:
            sentinels.append(vocabulary[SENTINEL.format(len(sentinels))])
        return cls(int(decoder_start_id), tokenizer.eos_token_id, tuple(sentinels))


def seq2seq_vocabulary(folder: str | Path, tokenizer: Any) -> Seq2SeqVocabulary | None:
    """The vocabulary of a prepared encoder–decoder (``tokenizer`` its own); None for a
    model of one stack."""
    if not is_encoder_decoder(read_facts(folder).model_type):
        return None
    return Seq2SeqVocabulary.of(tokenizer, decoder_start_token_id(folder))


def random_segmentation(count: int, segments: int, rng: np.random.Generator) -> np.ndarray:
    """(segments,) int64 lengths ≥ 1 summing to ``count``: cuts drawn uniformly among the
    count − 1 gaps (Raffel et al.'s ``_random_segmentation``)."""
    cuts = np.sort(rng.choice(count - 1, segments - 1, replace=False)) + 1
    return np.diff(np.concatenate([[0], cuts, [count]])).astype(np.int64)


def noise_mask(
    length: int, density: float, rng: np.random.Generator, mean_span: float = MEAN_SPAN_LENGTH
) -> np.ndarray:
    """(length,) bool: which of ``length`` ≥ 2 tokens are noise, in spans alternating with
    kept runs, the first run kept and the last noise (Raffel et al., §3.1.4)."""
    noise = min(max(int(np.round(length * density)), 1), length - 1)
    spans = min(max(int(np.round(noise / mean_span)), 1), noise, length - noise)
    noise_lengths = random_segmentation(noise, spans, rng)
    kept_lengths = random_segmentation(length - noise, spans, rng)
    runs = np.stack([kept_lengths, noise_lengths], axis=1).reshape(-1)
    return np.repeat(np.tile([False, True], spans), runs)


@dataclass(frozen=True)
class CorruptedSequence:
    """One sequence as an encoder–decoder reads it."""

    encoder_ids: np.ndarray
    """(T_e,) int64: what the encoder reads."""
    targets: np.ndarray
    """(T_d,) int64: the decoder's target."""
    target_special: np.ndarray
    """(T_d,) bool: which targets are special tokens (the EOS)."""
    encoder_positions: np.ndarray
    """(T_d,) int64: the encoder position of each target's row."""
    reads_targets: bool = False
    """The decoder reads ``targets`` themselves, the first of them its start token, never
    a row (next-token probing); otherwise it reads them shifted right after the start
    token (T5's own task), or ``decoder_inputs``."""
    decoder_inputs: np.ndarray | None = None
    """(T_d,) int64: what the decoder reads at each target's position, when given (the
    target before each: ``read_as_target``)."""


def read_as_target(sequence: CorruptedSequence) -> CorruptedSequence:
    """``sequence`` as He & Su's released code feeds its decoder: the decoder reads the
    target itself, all but its last token, and the row that has read target token p has
    target token p + 1 as its ``token_id``."""
    return CorruptedSequence(
        sequence.encoder_ids,
        sequence.targets[1:],
        sequence.target_special[1:],
        sequence.encoder_positions[1:],
        decoder_inputs=sequence.targets[:-1],
    )


def corrupt_spans(
    token_ids: np.ndarray,
    is_special: np.ndarray,
    noise: np.ndarray,
    vocabulary: Seq2SeqVocabulary,
) -> CorruptedSequence:
    """A sequence's encoder input and decoder target under ``noise`` (bool over its text
    tokens, in order): each noise span replaced by the next sentinel in the encoder's
    input, the target the sentinels each followed by its span, then EOS."""
    text = np.flatnonzero(~is_special)
    starts = noise & ~np.concatenate([[False], noise[:-1]])
    if starts.sum() > len(vocabulary.sentinel_ids):
        raise LayerlawsError(
            f"span corruption needs {int(starts.sum())} sentinel tokens for one sequence, "
            f"but the tokenizer has {len(vocabulary.sentinel_ids)} (<extra_id_0>, …); "
            f"lower the dataset's max_tokens or equilearning.masking.rate, or probe with "
            f"next_token"
        )
    state = np.zeros(len(token_ids), dtype=np.int8)  # 0 kept, 1 span start, 2 in a span
    state[text[noise]] = 2
    state[text[starts]] = 1
    span_of = np.full(len(token_ids), -1)
    span_of[text] = np.cumsum(starts) - 1
    encoder_ids, sentinel_at = [], []
    targets, encoder_positions = [], []
    for position, token in enumerate(token_ids):
        if state[position] == 1:
            sentinel_at.append(len(encoder_ids))
            encoder_ids.append(vocabulary.sentinel_ids[span_of[position]])
            targets.append(vocabulary.sentinel_ids[span_of[position]])
            encoder_positions.append(sentinel_at[-1])
        if state[position] == 0:
            encoder_ids.append(token)
        else:
            targets.append(token)
            encoder_positions.append(sentinel_at[-1])
    special = [False] * len(targets)
    if vocabulary.eos_id is not None:
        targets.append(vocabulary.eos_id)
        encoder_positions.append(len(encoder_ids) - 1)
        special.append(True)
    return CorruptedSequence(
        np.asarray(encoder_ids, dtype=np.int64),
        np.asarray(targets, dtype=np.int64),
        np.asarray(special, dtype=bool),
        np.asarray(encoder_positions, dtype=np.int64),
    )


def _frame(sentence_id: int, columns: dict[str, Any]) -> pl.DataFrame:
    length = len(columns["token_id"])
    return pl.DataFrame(
        {"sentence_id": np.full(length, sentence_id, dtype=np.int64), **columns},
        schema=TABLE_SCHEMA,
    )


def sequence_rows(
    sentence_id: int,
    sequence: CorruptedSequence,
    decoder_start_id: int,
    observe_special: bool,
) -> list[pl.DataFrame]:
    """The encoder's and the decoder's rows of one sequence (module docstring)."""
    encoder_length, decoder_length = len(sequence.encoder_ids), len(sequence.targets)
    encoder = {
        "position": np.arange(encoder_length),
        "token_id": sequence.encoder_ids,
        "is_special": np.ones(encoder_length, dtype=bool),
        "input_id": sequence.encoder_ids,
        "is_target": np.zeros(encoder_length, dtype=bool),
        "is_encoder": np.ones(encoder_length, dtype=bool),
        "encoder_position": np.arange(encoder_length),
    }
    special = sequence.target_special & (not observe_special)
    inputs = np.concatenate([[decoder_start_id], sequence.targets[:-1]])
    if sequence.reads_targets:
        special[0], inputs = True, sequence.targets
    if sequence.decoder_inputs is not None:
        inputs = sequence.decoder_inputs
    decoder = {
        "position": np.arange(decoder_length),
        "token_id": sequence.targets,
        "is_special": special,
        "input_id": inputs,
        "is_target": np.ones(decoder_length, dtype=bool),
        "is_encoder": np.zeros(decoder_length, dtype=bool),
        "encoder_position": sequence.encoder_positions,
    }
    return [_frame(sentence_id, encoder), _frame(sentence_id, decoder)]


def encoder_decoder_tokens(
    tokens: pl.DataFrame,
    *,
    probe: str,
    vocabulary: Seq2SeqVocabulary,
    rate: float,
    seed: int,
    special_tokens: str,
    layout: str,
) -> pl.DataFrame:
    """The table an encoder–decoder's pass reads (module docstring) of ``tokens`` (a
    tokens table) under ``probe`` (``next_token`` or ``span_corruption``, with noise
    density ``rate`` drawn from ``seed``) in ``layout`` (``encoder_then_decoder``, or
    ``one_stack``: span corruption only, for the decoder's layers alone);
    ``special_tokens`` (``exclude`` or ``include``) says whether special tokens are
    rows."""
    released = layout == "one_stack"
    if released and probe != "span_corruption":
        raise LayerlawsError(
            "under equilearning.encoder_decoder: one_stack, next-token probing reads the "
            "encoder alone, on a plain tokens table (layerlaws.forward.masking.probe_tokens)"
        )
    if probe not in ENCODER_DECODER_PROBES:
        raise LayerlawsError(
            f"an encoder–decoder model is probed with {' or '.join(ENCODER_DECODER_PROBES)}, "
            f"not {probe}"
        )
    if probe == "span_corruption" and not vocabulary.sentinel_ids:
        raise LayerlawsError(
            "span corruption needs the sentinel tokens <extra_id_0>, <extra_id_1>, … and "
            "this model's tokenizer has none; probe it with probe: next_token"
        )
    ordered = tokens.sort(["sentence_id", "position"])
    rng = np.random.default_rng(seed)
    frames: list[pl.DataFrame] = []
    left_out = 0
    for key, part in ordered.group_by("sentence_id", maintain_order=True):
        ids, special = part["token_id"].to_numpy(), part["is_special"].to_numpy()
        if probe == "next_token":
            sequence = CorruptedSequence(
                ids,
                np.concatenate([[vocabulary.decoder_start_id], ids]),
                np.concatenate([[True], special]),
                np.concatenate([[0], np.arange(len(ids))]),
                reads_targets=True,
            )
        elif released:
            noise = rng.random(int((~special).sum())) < rate
            if not noise.any():
                left_out += 1
                continue
            sequence = read_as_target(corrupt_spans(ids, special, noise, vocabulary))
        elif (~special).sum() < 2:
            left_out += 1
            continue
        else:
            noise = noise_mask(int((~special).sum()), rate, rng)
            sequence = corrupt_spans(ids, special, noise, vocabulary)
        frames += sequence_rows(
            int(key[0]), sequence, vocabulary.decoder_start_id, special_tokens == "include"
        )
    if left_out:
        why = "no corrupted token" if released else "fewer than 2 text tokens"
        log.warning("span corruption left out %d sequences with %s", left_out, why)
    if not frames:
        return pl.DataFrame(schema=TABLE_SCHEMA)
    return pl.concat(frames)
