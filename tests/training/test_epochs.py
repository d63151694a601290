"""Trainings sized in epochs (Yao & Xu train one epoch of each corpus): the corpus a
training of E epochs reads, its checks, and the estimate's line on it."""

from __future__ import annotations

import re

import numpy as np
import pytest
from conftest import TINY_TRAINING

from layerlaws.core.errors import LayerlawsError
from layerlaws.training.epochs import corpus_line
from layerlaws.training.plan import TrainingSpec, batch_indices, epoch_corpus
from layerlaws.training.workflow import check_trainings

SEQUENCES = np.arange(100 * 16).reshape(100, 16)
"""100 packed sequences of 16 tokens, each row distinct."""


def spec_of(**changes) -> TrainingSpec:
    return TrainingSpec.of({**TINY_TRAINING, **changes})


@pytest.mark.parametrize("epochs", [1, 2, 3])
def test_an_epoch_corpus_is_read_exactly_epochs_times(epochs):
    """12 steps × 4 sequences over E epochs: the first 48 / E sequences, each read E times
    by the training's batches."""
    spec = spec_of(epochs=epochs)
    corpus = epoch_corpus(SEQUENCES, spec, "wiki")
    np.testing.assert_array_equal(corpus, SEQUENCES[: 48 // epochs])
    read = np.concatenate([batch_indices(len(corpus), spec, step) for step in range(spec.steps)])
    np.testing.assert_array_equal(np.bincount(read, minlength=len(corpus)), epochs)


def test_without_epochs_the_whole_sample_is_the_corpus():
    np.testing.assert_array_equal(epoch_corpus(SEQUENCES, spec_of(), "wiki"), SEQUENCES)


def test_a_sample_too_small_for_an_epoch_names_the_dataset_and_the_fix():
    with pytest.raises(LayerlawsError, match=r"need 48 packed sequences .* makes 20; raise "):
        epoch_corpus(SEQUENCES[:20], spec_of(epochs=1), "wiki")
    with pytest.raises(LayerlawsError, match=r"datasets\.wiki\.n_samples \(about 2\.4×"):
        epoch_corpus(SEQUENCES[:20], spec_of(epochs=1), "wiki")


def test_steps_must_be_whole_epochs():
    config = {
        "training": {"tiny": {**TINY_TRAINING, "epochs": 5, "tokenizer": "m", "dataset": "d"}},
        "models": {"m": {}},
        "datasets": {"d": {}},
    }
    config["training"]["tiny"]["held_out"] = None
    with pytest.raises(
        LayerlawsError, match=re.escape("training.tiny.epochs is 5, and steps (12)")
    ):
        check_trainings(config)
    config["training"]["tiny"]["epochs"] = 3
    check_trainings(config)


SETTINGS = {**TINY_TRAINING, "epochs": 1, "dataset": "wiki"}
SOURCE = {"documents": 1_000, "tokens": 50_000}


def test_the_estimate_line_sizes_the_sample_from_the_source():
    """12 × 4 × 16 = 768 tokens, one epoch; 40 texts at 50 tokens each = 2,000 tokens;
    768 of the source's 50,000 are 1.54 %."""
    line = corpus_line("tiny", SETTINGS, {"n_samples": 40, "source_size": SOURCE})
    assert line == (
        "training tiny: 768 tokens (12 steps × 4 × 16), 1 epoch(s) of 768 tokens of wiki; "
        "wiki's sample of 40 texts holds ≈ 2,000 tokens; the source holds ≈ 50,000 "
        "(1.54% read)"
    )


def test_the_estimate_line_flags_a_sample_smaller_than_an_epoch():
    line = corpus_line("tiny", SETTINGS, {"n_samples": 10, "source_size": SOURCE})
    assert "holds ≈ 500 tokens, fewer than an epoch needs: raise datasets.wiki.n_samples" in line


def test_the_estimate_line_reads_a_packed_corpus_and_counts_passes_without_epochs():
    settings = {**TINY_TRAINING, "dataset": "wiki"}
    line = corpus_line("tiny", settings, {"n_samples": "all"}, {"corpus_tokens": 384})
    assert line.endswith("its packed corpus holds 384 tokens (the training reads it 2.00 times)")
    line = corpus_line("tiny", settings, {"n_samples": "all"})
    assert line.endswith("wiki's sample is sized when packed (its corpus.json)")
