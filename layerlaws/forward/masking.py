"""Masked-LM probing (He & Su, Fig. 7): the inputs of an encoder's own task; and the
probes of every model (``probe_of``, ``probe_tokens``: next token, masked LM, and an
encoder–decoder's span corruption, ``layerlaws.forward.span_corruption``).

Each text token is chosen with probability ``rate`` (15 % as in BERT), independently.
Under the ``mask_only`` scheme (He & Su's released code) every chosen token is replaced by
the mask token; under ``bert`` a chosen token is replaced by the mask token with
probability 0.8, by a token drawn uniformly from the vocabulary with probability 0.1, and
kept with probability 0.1. The model reads the replaced ids (``input_id``); the regression
rows are the chosen positions only (``is_target``: under ``mask_only`` exactly the
positions the model reads as the mask token), and their targets are read from the
original ids (``token_id``), so target offset 0 is the masked-LM task itself. Draws come
from one NumPy generator seeded by ``seed``, over the table in (sentence, position)
order: the same table and seed give the same masks, and both schemes choose the same
positions.
"""

from __future__ import annotations

import numpy as np
import polars as pl

from layerlaws.core.errors import LayerlawsError
from layerlaws.forward.model_pass import observed_tokens
from layerlaws.forward.settings import MaskingSettings, regressed_stack
from layerlaws.forward.span_corruption import Seq2SeqVocabulary, encoder_decoder_tokens
from layerlaws.models.architectures import ARCHITECTURES, LayerChoice, is_encoder_decoder

REPLACE_WITH_MASK, REPLACE_WITH_RANDOM = 0.8, 0.1


def mask_tokens(
    tokens: pl.DataFrame,
    vocab_size: int,
    mask_token_id: int | None,
    rate: float,
    seed: int,
    scheme: str,
) -> pl.DataFrame:
    """``tokens`` (a tokens table) sorted by sentence and position, with ``input_id``
    (int64, what the model reads) and ``is_target`` (bool, a chosen text token), masked
    under ``scheme`` (``mask_only`` or ``bert``)."""
    if mask_token_id is None:
        raise LayerlawsError(
            "masked-LM probing needs a mask token, and this model's tokenizer has none; "
            "probe it with probe: next_token"
        )
    ordered = tokens.sort(["sentence_id", "position"])
    rng = np.random.default_rng(seed)
    count = ordered.height
    text = ~ordered["is_special"].to_numpy()
    chosen = text & (rng.random(count) < rate)
    original = ordered["token_id"].to_numpy()
    if scheme == "mask_only":
        input_ids = np.where(chosen, mask_token_id, original)
    else:
        input_ids = bert_replacements(rng, chosen, original, vocab_size, mask_token_id)
    return ordered.with_columns(
        input_id=pl.Series(input_ids, dtype=pl.Int64), is_target=pl.Series(chosen)
    )


def bert_replacements(
    rng: np.random.Generator,
    chosen: np.ndarray,
    original: np.ndarray,
    vocab_size: int,
    mask_token_id: int,
) -> np.ndarray:
    """The ids the model reads under BERT's rule: each ``chosen`` position becomes the
    mask token (80 %), a uniformly drawn id (10 %) or stays ``original`` (10 %)."""
    draw = rng.random(len(chosen))
    random_ids = rng.integers(0, vocab_size, len(chosen))
    return np.where(
        chosen & (draw < REPLACE_WITH_MASK),
        mask_token_id,
        np.where(chosen & (draw < REPLACE_WITH_MASK + REPLACE_WITH_RANDOM), random_ids, original),
    )


TARGET_OFFSETS = {"next_token": 1, "masked_lm": 0, "span_corruption": 0}
"""The target offset of each probe's own task: the next token, the masked token, or the
token an encoder–decoder's decoder predicts at the row (span corruption)."""
OWN_PROBES = {"causal": "next_token", "masked": "masked_lm", "seq2seq": "span_corruption"}
"""The probe of each objective of the architecture table (``auto``)."""


def probe_of(configured: str, model_type: str) -> str:
    """The probing task of a model: ``auto`` is the family's own objective (``masked_lm``
    for encoders, ``span_corruption`` for encoder–decoders, ``next_token`` otherwise);
    masked-LM probing needs an encoder, span corruption an encoder–decoder."""
    objective = ARCHITECTURES[model_type].objective
    if configured == "auto":
        return OWN_PROBES[objective]
    if configured == "masked_lm" and objective != "masked":
        instead = "span_corruption or next_token" if objective == "seq2seq" else "next_token"
        raise LayerlawsError(
            f"probe: masked_lm needs a masked-LM encoder (BERT, RoBERTa); a {model_type!r} "
            f"model is {objective}: probe it with {instead}"
        )
    if configured == "span_corruption" and objective != "seq2seq":
        raise LayerlawsError(
            f"probe: span_corruption needs an encoder–decoder (T5); a {model_type!r} model "
            f"is {objective}: probe it with {OWN_PROBES[objective]}"
        )
    return configured


def probe_layers(
    probe: str, model_type: str, encoder_decoder: str, layer_states: str
) -> LayerChoice:
    """The layers a pass under ``probe`` (resolved, ``probe_of``) regresses: under
    ``encoder_decoder: one_stack`` an encoder–decoder's encoder alone for ``next_token``
    and its decoder alone for ``span_corruption`` (He & Su's released code), under
    ``encoder_then_decoder`` both stacks as one series; ``layer_states: hidden_states``
    numbers them as transformers' ``output_hidden_states`` (``LayerChoice``)."""
    stack = regressed_stack(probe, encoder_decoder) if is_encoder_decoder(model_type) else "both"
    return LayerChoice(stack=stack, hidden_states=layer_states == "hidden_states")


def probe_tokens(
    tokens: pl.DataFrame,
    *,
    probe: str,
    vocab_size: int,
    mask_token_id: int | None,
    masking: MaskingSettings,
    special_tokens: str,
    encoder_decoder: str,
    seq2seq: Seq2SeqVocabulary | None = None,
) -> pl.DataFrame:
    """The tokens table as a probe's pass reads it: special tokens observed or not
    (``special_tokens``: ``exclude`` or ``include``, ``model_pass.observed_tokens``), then
    unchanged for ``next_token``, masked (``mask_tokens`` with ``masking``'s ``rate``,
    ``seed`` and ``scheme``) for ``masked_lm``. For an encoder–decoder (``seq2seq``, its
    vocabulary) the table of its two stacks under ``next_token`` or ``span_corruption``
    (``layerlaws.forward.span_corruption`` in the layout ``encoder_decoder``, noise
    density ``masking.rate``, seeded by ``masking.seed``); under ``encoder_decoder:
    one_stack`` its ``next_token`` table is the plain one, which its encoder reads
    alone."""
    if seq2seq is not None and not (encoder_decoder == "one_stack" and probe == "next_token"):
        return encoder_decoder_tokens(
            tokens,
            probe=probe,
            vocabulary=seq2seq,
            rate=masking.rate,
            seed=masking.seed,
            special_tokens=special_tokens,
            layout=encoder_decoder,
        )
    if probe == "span_corruption":
        raise LayerlawsError("span corruption needs an encoder–decoder's vocabulary (seq2seq)")
    tokens = observed_tokens(tokens, special_tokens)
    if probe == "next_token":
        return tokens
    return mask_tokens(
        tokens, vocab_size, mask_token_id, masking.rate, masking.seed, masking.scheme
    )
