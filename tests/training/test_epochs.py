"""Trainings sized in epochs and token budgets (Yao & Xu train one epoch of each whole
corpus): an epoch reads every packed sequence exactly once whatever the corpus's size, a
token budget stops the packing at its sequences, the packing streams to disk as one
in-memory pack would, a step in passes (of micro_batch_size) gives one pass's update, a
corpus memory-mapped from disk trains as the array, the checks, and the estimate's line."""

from __future__ import annotations

import copy
import io
import re

import numpy as np
import pytest
import torch
from conftest import TINY_TRAINING
from safetensors.torch import load_file
from transformers import LlamaForCausalLM

from layerlaws.core.errors import LayerlawsError
from layerlaws.training import packing
from layerlaws.training.epochs import corpus_line, planned_tokens
from layerlaws.training.packing import PackedWriter, sequence_dtype, text_batches
from layerlaws.training.plan import (
    TrainingSpec,
    batch_indices,
    check_budget,
    check_corpus_size,
    checkpoint_folder,
    pack_sequences,
)
from layerlaws.training.train import accumulate_gradients, initial_model, model_config, train
from layerlaws.training.workflow import check_trainings


def spec_of(**changes) -> TrainingSpec:
    return TrainingSpec.of({**TINY_TRAINING, **changes})


@pytest.mark.parametrize("epochs", [1, 2, 3])
@pytest.mark.parametrize("n_sequences", [12, 37, 48])
def test_an_epoch_reads_every_sequence_exactly_once(epochs, n_sequences):
    """12 steps over E epochs cut each epoch's permutation into 12 / E batches: every
    sequence read once per epoch, each batch ⌊n·E/12⌋ or one more, and tokens_seen counts
    what was read."""
    spec = spec_of(epochs=epochs)
    batches = [batch_indices(n_sequences, spec, step) for step in range(spec.steps)]
    read = np.concatenate(batches)
    np.testing.assert_array_equal(np.bincount(read, minlength=n_sequences), epochs)
    per_epoch = 12 // epochs
    for epoch in range(epochs):
        within = np.concatenate(batches[epoch * per_epoch : (epoch + 1) * per_epoch])
        np.testing.assert_array_equal(np.sort(within), np.arange(n_sequences))
    sizes = {len(batch) for batch in batches}
    assert sizes <= {n_sequences * epochs // 12, -(-n_sequences * epochs // 12)}
    counted = [spec.tokens_seen(step, n_sequences) for step in range(spec.steps + 1)]
    expected = np.cumsum([0] + [len(batch) * spec.context for batch in batches])
    np.testing.assert_array_equal(counted, expected)


def test_an_epoch_of_steps_times_batch_sequences_reads_the_batches_of_one_pass():
    """n = steps × batch_size: the epoch's batches are those of a training without epochs
    (a token budget of that many sequences, read once, trains as before)."""
    one_pass = [batch_indices(48, spec_of(), step) for step in range(12)]
    epoch = [batch_indices(48, spec_of(epochs=1), step) for step in range(12)]
    for ours, theirs in zip(epoch, one_pass, strict=True):
        np.testing.assert_array_equal(ours, theirs)
    assert spec_of(epochs=1).tokens_seen(5, 48) == spec_of().tokens_seen(5) == 5 * 4 * 16


def packed_file(texts, context, limit=None, chunk=None, vocab=100):
    """``texts`` (token ids) through a ``PackedWriter`` in chunks of ``chunk`` texts: the
    array read back from the file, the facts, and the texts it asked for."""
    handle = io.BytesIO()
    writer = PackedWriter(handle, context, 0, vocab, limit)
    chunk = chunk or len(texts)
    asked = 0
    for start in range(0, len(texts), chunk):
        asked += len(texts[start : start + chunk])
        if not writer.add(texts[start : start + chunk]):
            break
    facts = writer.finish()
    handle.seek(0)
    return np.load(handle), facts, asked


TEXTS = [list(range(1 + i % 7, 1 + i % 7 + 3 + i % 11)) for i in range(60)]
"""60 texts of 3 to 13 token ids, 1 to 20."""


@pytest.mark.parametrize("chunk", [1, 7, 60])
def test_the_writer_packs_as_one_pack_in_memory_in_any_chunks(chunk):
    whole = pack_sequences(TEXTS, 0, 16)
    found, facts, asked = packed_file(TEXTS, 16, chunk=chunk)
    np.testing.assert_array_equal(found, whole)
    assert found.dtype == np.uint16 and asked == 60
    assert (facts.texts, facts.sequences, facts.tokens) == (60, len(whole), whole.size)
    np.testing.assert_array_equal(facts.counts, np.bincount(whole.ravel(), minlength=100))
    assert sequence_dtype(2**16) == np.uint16 and sequence_dtype(2**16 + 1) == np.uint32


def test_a_token_budget_stops_the_packing_at_its_sequences():
    """A budget of 20 sequences: the first 20 of the whole packing, and the writer asks for
    no text once it has them."""
    whole = pack_sequences(TEXTS, 0, 16)
    found, facts, asked = packed_file(TEXTS, 16, limit=20, chunk=5)
    np.testing.assert_array_equal(found, whole[:20])
    assert facts.sequences == 20 and facts.tokens == 20 * 16
    assert asked < len(TEXTS)
    spec = spec_of(token_budget=20 * 16 + 15)
    assert spec.budget_sequences == 20
    check_budget(20, spec, "wiki")


def test_texts_are_tokenised_in_batches_of_bounded_texts_and_characters(monkeypatch):
    """At most 3 texts and 10 characters a batch, a longer text alone, all in order."""
    monkeypatch.setattr(packing, "BATCH_CHARACTERS", 10)
    texts = ["abcd", "ef", "ghij", "k", "l", "m", "n", "o" * 25, "pq"]
    batches = list(text_batches(iter(texts), 3))
    assert batches == [["abcd", "ef", "ghij"], ["k", "l", "m"], ["n"], ["o" * 25], ["pq"]]
    assert list(text_batches(iter([]), 3)) == []


def test_a_corpus_short_of_its_budget_or_steps_says_what_to_change():
    with pytest.raises(LayerlawsError, match=r"needs 20 packed sequences .* makes 8; raise "):
        check_budget(8, spec_of(token_budget=320), "wiki")
    with pytest.raises(LayerlawsError, match=r"datasets\.wiki\.n_samples \(about 2\.5×"):
        check_budget(8, spec_of(token_budget=320), "wiki")
    with pytest.raises(LayerlawsError, match="whole source of dataset 'wiki' makes 8; lower"):
        check_budget(8, spec_of(token_budget=320, corpus="source"), "wiki")
    with pytest.raises(LayerlawsError, match=r"into 12 batches, more than the 7 .* about 2 for"):
        check_corpus_size(7, spec_of(epochs=1), "tiny")
    check_corpus_size(12, spec_of(epochs=1), "tiny")
    with pytest.raises(LayerlawsError, match="fewer than one batch"):
        check_corpus_size(3, spec_of(), "tiny")
    with pytest.raises(LayerlawsError, match="outside the tokenizer's vocabulary of 100"):
        packed_file([[5, 100]], 2)


def test_steps_must_be_whole_epochs_and_a_budget_one_sequence():
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
    config["training"]["tiny"] |= {"epochs": 3, "token_budget": 15}
    with pytest.raises(LayerlawsError, match="token_budget is 15, less than one sequence of"):
        check_trainings(config)
    config["training"]["tiny"]["token_budget"] = 16
    check_trainings(config)


def trained(spec, corpus, sequences, folder):
    tokenizer, _, held_out = corpus
    train(
        spec,
        model_config(spec, tokenizer),
        tokenizer,
        sequences,
        held_out=held_out,
        folder=folder,
        device="cpu",
    )
    return load_file(str(checkpoint_folder(folder, spec.steps) / "model.safetensors"))


@pytest.mark.parametrize("passes", [{"batch_size": 3}, {"batch_size": 8, "micro_batch_size": 3}])
def test_a_step_of_more_than_batch_size_sequences_is_one_pass_s_update(
    corpus, tmp_path, monkeypatch, passes
):
    """One epoch of 30 sequences in 4 steps (7 or 8 sequences a step): in passes of at most
    3 (3 passes a step, the model's forward never given more), under batch_size 3 or
    micro_batch_size 3, the weights end as in one pass a step (batch_size 8), and not as
    they began."""
    _, sequences, _ = corpus
    settings = {"epochs": 1, "steps": 4, "warmup_steps": 1, "checkpoints": [0, 4]}
    one = trained(spec_of(batch_size=8, **settings), corpus, sequences[:30], tmp_path / "one")
    sizes, forward = [], LlamaForCausalLM.forward
    monkeypatch.setattr(
        LlamaForCausalLM,
        "forward",
        lambda model, **inputs: sizes.append(len(inputs["input_ids"])) or forward(model, **inputs),
    )
    three = trained(spec_of(**passes, **settings), corpus, sequences[:30], tmp_path / "three")
    assert max(sizes) == 3 and len(sizes) > 4 * 3
    for name in one:
        torch.testing.assert_close(three[name], one[name], rtol=1e-4, atol=1e-6)
    initial = load_file(str(checkpoint_folder(tmp_path / "one", 0) / "model.safetensors"))
    assert any(not torch.allclose(initial[name], one[name]) for name in one)


def test_passes_of_micro_batch_size_give_one_pass_s_gradients_and_update(corpus):
    """A step of 8 sequences in passes of at most 3 (3, 3 and 2, as the model's forward
    sees them) of a float64 model: the loss, the gradients and the weights after an AdamW
    step are those of one pass over all 8, from transformers' own loss; and the step
    moved the weights."""
    tokenizer, sequences, _ = corpus
    spec = spec_of(batch_size=8, micro_batch_size=3)
    one_pass = initial_model(spec, model_config(spec, tokenizer)).double()
    passes = copy.deepcopy(one_pass)
    initial = [parameter.detach().clone() for parameter in one_pass.parameters()]
    batch = torch.from_numpy(sequences[:8])
    loss = one_pass(input_ids=batch, labels=batch).loss
    loss.backward()
    sizes = []
    passes.register_forward_hook(
        lambda _, args, inputs, output: sizes.append(len(inputs["input_ids"])), with_kwargs=True
    )
    summed = accumulate_gradients(passes, sequences, np.arange(8), spec.micro_batch_size, "cpu")
    assert sizes == [3, 3, 2]
    np.testing.assert_allclose(summed.item(), loss.item(), rtol=1e-6)  # transformers': float32
    pairs = list(zip(passes.parameters(), one_pass.parameters(), strict=True))
    for ours, reference in pairs:
        np.testing.assert_allclose(ours.grad.numpy(), reference.grad.numpy(), rtol=1e-9, atol=1e-15)
    for model in (passes, one_pass):
        torch.optim.AdamW(model.parameters(), lr=1e-2).step()
    for ours, reference in pairs:
        np.testing.assert_allclose(
            ours.detach().numpy(), reference.detach().numpy(), rtol=1e-12, atol=1e-14
        )
    assert any(not torch.equal(a, b) for a, b in zip(initial, one_pass.parameters(), strict=True))


def test_a_memory_mapped_corpus_of_uint16_trains_as_the_int64_array(corpus, tmp_path):
    tokenizer, sequences, _ = corpus
    path = tmp_path / "sequences.npy"
    np.save(path, sequences.astype(sequence_dtype(len(tokenizer))))
    spec = spec_of(steps=4, checkpoints=[0, 4])
    mapped = trained(spec, corpus, np.load(path, mmap_mode="r"), tmp_path / "mapped")
    in_memory = trained(spec, corpus, sequences, tmp_path / "memory")
    assert mapped.keys() == in_memory.keys()
    assert all(torch.equal(mapped[name], in_memory[name]) for name in mapped)


SOURCE = {"documents": 1_000, "tokens": 50_000}
SETTINGS = {**TINY_TRAINING, "epochs": 1, "dataset": "wiki"}


def test_the_estimate_line_plans_a_whole_source_from_its_assumed_size():
    """50,000 tokens: 3,125 sequences of 16, one epoch in 12 steps of ≈ 260.4 sequences;
    uint16 for 1,000 tokens: 100,000 bytes."""
    settings = {**SETTINGS, "corpus": "source"}
    dataset = {"n_samples": 100, "source_size": SOURCE}
    assert planned_tokens(settings, dataset, None) == 50_000
    line = corpus_line("tiny", settings, dataset, 1000)
    assert line == (
        "training tiny: 50,000 tokens in 12 steps of ≈ 260.4 (batch_size 4) sequences of 16: "
        "1 epoch(s) of wiki's whole source, 3,125 sequences (assumed from "
        "datasets.wiki.source_size; exact once packed), 0.0001 GB on disk; the source holds "
        "≈ 50,000 tokens (the corpus is 100.00%)"
    )
    packed = corpus_line("tiny", settings, dataset, 1000, {"sequences": 48})
    assert packed.startswith("training tiny: 768 tokens in 12 steps of ≈ 4.0 (batch_size 4)")
    assert "48 sequences (packed)" in packed and "(the corpus is 1.54%)" in packed


def test_the_estimate_line_of_a_token_budget_and_of_a_sample():
    budget = {**SETTINGS, "token_budget": 768}
    line = corpus_line("tiny", budget, {"n_samples": 40, "source_size": SOURCE}, 1000)
    assert "1 epoch(s) of the first 48 sequences of wiki's sample (token_budget 768), 48 " in line
    assert "(its token budget)" in line
    line = corpus_line("tiny", budget, {"n_samples": 10, "source_size": SOURCE}, 1000)
    assert "31 sequences (assumed from n_samples ×" in line
    assert line.endswith(
        "fewer than its token budget: raise datasets.wiki.n_samples; the source "
        "holds ≈ 50,000 tokens (the corpus is 0.99%)"
    )
    settings = {**TINY_TRAINING, "dataset": "wiki"}
    line = corpus_line("tiny", settings, {"n_samples": "all"}, 1000, {"sequences": 24})
    assert line.endswith("the training reads it 2.00 times")
    line = corpus_line("tiny", settings, {"n_samples": "all"}, 1000)
    assert line.endswith("wiki's sample; sized when packed (its corpus.json)")
    assert planned_tokens(settings, {"n_samples": "all"}, None) == 12 * 4 * 16
