"""Held-out bits per byte and per character from the model pass, against the model run on
each sequence with plain torch and the bytes of the text read from the tokenizer's
character offsets (not its decoder): next-token probing of a tiny GPT-2 and masked-LM
probing of a tiny RoBERTa, both with a byte-level BPE tokenizer that splits 中 over
several tokens."""

from __future__ import annotations

import itertools
import math

import numpy as np
import polars as pl
import pytest
import torch
from conftest import build_tokenizer
from tiny_models import save_tiny_model
from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
from transformers import PreTrainedTokenizerFast

from layerlaws.equilearning.evaluation import HeldOutEvaluation
from layerlaws.forward.masking import TARGET_OFFSETS, mask_tokens
from layerlaws.forward.model_pass import run_forward_pass
from layerlaws.models.loading import load_model, load_tokenizer
from layerlaws.models.preparation import prepare_model
from layerlaws.text.spans import sequence_spans, token_spans, tokenizer_fingerprint
from layerlaws.text.tokens import tokenize_sentences

TEXTS = [
    "the café is here and the world is there",
    "hello 中 world, the café is 中文 here",
    "naïve été: the world is here",
    "the 中 and é of the world",
]


def byte_level_tokenizer() -> PreTrainedTokenizerFast:
    """A byte-level BPE trained on ASCII and é only: 中 is three byte tokens."""
    core = Tokenizer(models.BPE())
    core.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    core.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=300,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        special_tokens=["<pad>", "<mask>"],
    )
    core.train_from_iterator(["hello world, the café is here and there: naïve été"] * 5, trainer)
    return PreTrainedTokenizerFast(tokenizer_object=core, pad_token="<pad>", mask_token="<mask>")


def offset_spans(text: str, tokenizer) -> tuple[list[int], np.ndarray, np.ndarray]:
    """(ids, bytes, characters) of each token of ``text`` from its character offsets: a
    token spans the text from where the token before reached to its own end, or to where
    the next token starts when that is before (a character split over several tokens is
    in the offsets of each piece; it belongs to the last)."""
    encoded = tokenizer(text, return_offsets_mapping=True, add_special_tokens=False)
    offsets = encoded["offset_mapping"]
    reached = [min(end, start) for (_, end), (start, _) in itertools.pairwise(offsets)]
    reached.append(offsets[-1][1])
    characters = np.diff([0, *reached])
    n_bytes = np.diff([len(text[:end].encode("utf-8")) for end in [0, *reached]])
    return encoded["input_ids"], n_bytes, characters


@pytest.fixture(scope="module")
def tokenizer():
    tokenizer = byte_level_tokenizer()
    assert len(tokenizer("中", add_special_tokens=False)["input_ids"]) == 3
    return tokenizer


@pytest.fixture(scope="module")
def sentences():
    return pl.DataFrame({"sentence_id": list(range(len(TEXTS))), "text": TEXTS})


def prepared(family: str, tokenizer, tmp_path_factory) -> tuple:
    root = tmp_path_factory.mktemp(family)
    source = save_tiny_model(root / "source", family, tokenizer)
    facts = prepare_model({"source": {"kind": "local", "path": str(source)}}, root / "m")
    return facts, load_model(root / "m", "float32", "cpu"), load_tokenizer(root / "m")


def evaluate(model, facts, tokens, tokenizer, target_offset: int) -> dict:
    evaluation = HeldOutEvaluation(
        target_offset, token_spans(tokens, tokenizer), tokenizer_fingerprint(tokenizer)
    )
    run_forward_pass(
        model, facts, tokens, [], 3, "cpu", progress=False, logit_observers=[evaluation]
    )
    return evaluation.table().row(0, named=True)


def test_spans_of_a_sequence_are_its_text_read_from_the_offsets(tokenizer):
    for text in TEXTS:
        ids, n_bytes, characters = offset_spans(text, tokenizer)
        spans = sequence_spans(ids, tokenizer)
        assert spans[0].tolist() == n_bytes.tolist(), text
        assert spans[1].tolist() == characters.tolist(), text
        assert spans[0].sum() == len(text.encode("utf-8"))
    # 中 of "the 中 and": its first two byte tokens span nothing, the third all 3 bytes.
    ids = tokenizer("the 中", add_special_tokens=False)["input_ids"]
    assert sequence_spans(ids, tokenizer)[0].tolist()[-3:] == [0, 0, 3]


def test_next_token_bits_per_byte_against_plain_torch(tokenizer, sentences, tmp_path_factory):
    facts, model, loaded = prepared("gpt2", tokenizer, tmp_path_factory)
    tokens = tokenize_sentences(sentences, loaded, max_tokens=64)
    assert not tokens["is_special"].any()
    row = evaluate(model, facts, tokens, loaded, TARGET_OFFSETS["next_token"])
    nats = 0.0
    n_bytes = n_characters = predictions = 0
    for text in TEXTS:
        ids, spans, _ = offset_spans(text, tokenizer)
        with torch.no_grad():
            logits = model(input_ids=torch.tensor([ids])).logits[0].double()
        targets = torch.tensor(ids[1:])
        nats += float(torch.nn.functional.cross_entropy(logits[:-1], targets, reduction="sum"))
        # Every token but the first is predicted: the text after the first token (of
        # "naïve", 'na' and the first byte of ï: the text from ï on).
        (_, first_end), (second_start, _) = tokenizer(text, return_offsets_mapping=True)[
            "offset_mapping"
        ][:2]
        covered = text[min(first_end, second_start) :]
        assert spans[1:].sum() == len(covered.encode("utf-8"))
        n_bytes += len(covered.encode("utf-8"))
        n_characters += len(covered)
        predictions += len(ids) - 1
    assert (row["n_predictions"], row["n_bytes"], row["n_characters"]) == (
        predictions,
        n_bytes,
        n_characters,
    )
    assert n_bytes > n_characters
    assert row["loss"] == pytest.approx(nats / predictions, rel=1e-6)
    assert row["bits_per_byte"] == pytest.approx(nats / math.log(2) / n_bytes, rel=1e-6)
    assert row["bits_per_character"] == pytest.approx(nats / math.log(2) / n_characters, rel=1e-6)
    assert row["tokenizer"] == tokenizer_fingerprint(tokenizer)


def test_masked_lm_bits_per_byte_count_the_masked_tokens(tokenizer, sentences, tmp_path_factory):
    facts, model, loaded = prepared("roberta", tokenizer, tmp_path_factory)
    tokens = tokenize_sentences(sentences, loaded, max_tokens=64)
    masked = mask_tokens(tokens, facts.vocab_size, loaded.mask_token_id, 0.4, 3, "mask_only")
    row = evaluate(model, facts, masked, loaded, TARGET_OFFSETS["masked_lm"])
    nats = 0.0
    n_bytes = n_characters = 0
    for (sentence_id,), part in masked.group_by("sentence_id", maintain_order=True):
        ids, spans, characters = offset_spans(TEXTS[sentence_id], tokenizer)
        assert part["token_id"].to_list() == ids
        at = np.flatnonzero(part["is_target"].to_numpy())
        with torch.no_grad():
            logits = model(input_ids=torch.tensor([part["input_id"].to_list()])).logits[0]
        targets = torch.tensor(ids)[at]
        loss = torch.nn.functional.cross_entropy(logits[at].double(), targets, reduction="sum")
        nats += float(loss)
        n_bytes += int(spans[at].sum())
        n_characters += int(characters[at].sum())
    assert row["n_predictions"] == int(masked["is_target"].sum())
    assert (row["n_bytes"], row["n_characters"]) == (n_bytes, n_characters)
    assert row["bits_per_byte"] == pytest.approx(nats / math.log(2) / n_bytes, rel=1e-6)
    assert row["bits_per_character"] == pytest.approx(nats / math.log(2) / n_characters, rel=1e-6)


def test_an_evaluation_left_out_of_the_pass_is_one_row_of_nan(tokenizer):
    """How a caller skips a model whose logits mean nothing: no logits observed."""
    row = HeldOutEvaluation(1, pl.DataFrame(), "abc").table().row(0, named=True)
    assert row["n_predictions"] == 0 and row["tokenizer"] == "abc"
    for column in ("loss", "perplexity", "accuracy", "bits_per_byte", "bits_per_character"):
        assert math.isnan(row[column]), column


def test_tokenizer_fingerprints_tell_vocabularies_apart(tokenizer, texts):
    word_level = build_tokenizer(texts, add_bos=True, padding_side="left")
    same_vocabulary = build_tokenizer(texts, add_bos=False, padding_side="right")
    fingerprint = tokenizer_fingerprint(word_level)
    assert len(fingerprint) == 12 and int(fingerprint, 16) >= 0
    assert tokenizer_fingerprint(same_vocabulary) == fingerprint
    assert tokenizer_fingerprint(tokenizer) != fingerprint
    assert tokenizer_fingerprint(byte_level_tokenizer()) == tokenizer_fingerprint(tokenizer)
