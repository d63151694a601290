"""Training from scratch: the plan (checkpoint steps, learning rate, data order, packing),
a resumed run ending with the same weights as an uninterrupted one, a trained checkpoint
loading as a model, and a corpus too small for one batch."""

from __future__ import annotations

import itertools
import json
import subprocess
import sys

import numpy as np
import pytest
import torch
from conftest import TINY_TRAINING, llama_tokenizer
from safetensors.torch import load_file

from layerlaws.core.errors import LayerlawsError
from layerlaws.training.costs import activation_bytes
from layerlaws.training.plan import (
    TrainingSpec,
    batch_indices,
    checkpoint_folder,
    checkpoint_steps,
    learning_rate_at,
    pack_sequences,
    parameter_count,
    unigram_cross_entropy,
    unigram_entropy,
)
from layerlaws.training.train import (
    CHECKPOINT_FILE,
    STATE_FILE,
    model_config,
    train,
)

SETTINGS = TINY_TRAINING


def spec_of(**changes) -> TrainingSpec:
    return TrainingSpec.of({**SETTINGS, **changes})


def test_checkpoint_steps_are_log_spaced_from_zero() -> None:
    assert checkpoint_steps(6, 400) == (0, 1, 4, 20, 89, 400)
    assert checkpoint_steps([5, 0, 5], 10) == (0, 5)
    with pytest.raises(LayerlawsError, match="beyond steps"):
        checkpoint_steps([0, 20], 10)


def test_learning_rate_warms_up_then_decays_to_its_floor() -> None:
    spec = spec_of(steps=100, warmup_steps=10, learning_rate=1.0, final_learning_rate=0.1)
    rates = [learning_rate_at(spec, step) for step in range(100)]
    assert rates[0] == pytest.approx(0.1) and rates[9] == pytest.approx(1.0)
    assert all(a >= b for a, b in itertools.pairwise(rates[9:]))
    assert rates[-1] == pytest.approx(0.1 + 0.9 * 0.5 * (1 + np.cos(np.pi * 89 / 90)))


def test_data_order_is_a_seeded_permutation_per_epoch() -> None:
    spec = spec_of(batch_size=4)
    epoch = np.concatenate([batch_indices(10, spec, step) for step in range(2)])
    assert len(set(epoch.tolist())) == 8  # two full batches of distinct sequences
    assert np.array_equal(batch_indices(10, spec, 2), batch_indices(10, spec, 2))
    assert not np.array_equal(batch_indices(10, spec, 0), batch_indices(10, spec, 2))
    with pytest.raises(LayerlawsError, match="fewer than one batch"):
        batch_indices(3, spec, 0)


def test_packing_separates_texts_and_drops_the_tail() -> None:
    packed = pack_sequences([[1, 2, 3], [4, 5]], eos_id=0, context=3)
    assert packed.tolist() == [[1, 2, 3], [0, 4, 5]]
    assert unigram_entropy(np.array([0, 2, 2])) == pytest.approx(np.log(2))


def test_parameter_count_matches_the_built_model(texts) -> None:
    tokenizer = llama_tokenizer(texts)
    from transformers import AutoModelForCausalLM

    for architecture in ("llama", "gpt2"):
        for tied in (True, False):
            spec = spec_of(architecture=architecture, tie_embeddings=tied)
            model = AutoModelForCausalLM.from_config(model_config(spec, tokenizer))
            expected = sum(p.numel() for p in model.parameters())
            assert parameter_count(spec, len(tokenizer)) == expected, (architecture, tied)


def weights(folder) -> dict[str, torch.Tensor]:
    return load_file(str(folder / "model.safetensors"))


def test_interrupted_training_resumes_to_the_same_weights(corpus, tmp_path) -> None:
    tokenizer, sequences, held_out = corpus
    spec = spec_of()
    config = model_config(spec, tokenizer)
    whole = train(
        spec,
        config,
        tokenizer,
        sequences,
        held_out=held_out,
        folder=tmp_path / "whole",
        device="cpu",
    )

    class Interrupted(Exception):
        pass

    def stop_after_step_5(step: int) -> None:
        if step == 5:
            raise Interrupted

    interrupted = tmp_path / "interrupted"
    with pytest.raises(Interrupted):
        train(
            spec,
            config,
            tokenizer,
            sequences,
            held_out=held_out,
            folder=interrupted,
            device="cpu",
            on_checkpoint=stop_after_step_5,
        )
    assert not checkpoint_folder(interrupted, 12).exists()
    resumed = train(
        spec, config, tokenizer, sequences, held_out=held_out, folder=interrupted, device="cpu"
    )
    assert resumed.resumed_from == 5 and whole.resumed_from is None
    for step in spec.checkpoints:
        a, b = (
            weights(checkpoint_folder(tmp_path / "whole", step)),
            weights(checkpoint_folder(interrupted, step)),
        )
        assert a.keys() == b.keys()
        assert all(torch.equal(a[name], b[name]) for name in a), step
    assert resumed.curve == whole.curve
    # The optimizer state is kept only in the latest checkpoint.
    assert [
        step
        for step in spec.checkpoints
        if (checkpoint_folder(interrupted, step) / STATE_FILE).exists()
    ] == [12]
    # Training changed the weights, and the held-out loss fell.
    first, last = (
        weights(checkpoint_folder(interrupted, 0)),
        weights(checkpoint_folder(interrupted, 12)),
    )
    assert not all(torch.equal(first[name], last[name]) for name in first)
    losses = [row["held_out_loss"] for row in whole.checkpoints]
    assert losses[-1] < losses[0]


def test_a_compiled_training_takes_the_eager_steps(corpus, tmp_path) -> None:
    """``compile: true`` runs the steps through torch.compile: the same losses up to float32
    rounding (a forward of two blocks, its operations fused and reordered: a few ε32 of the
    loss, 1e-5 relative bounds it), weights within 2·steps·lr of the eager run's (AdamW
    normalises each gradient, so one whose rounding flips its sign moves by up to the
    learning rate a step), the same fingerprint, and a resume across it."""
    tokenizer, sequences, held_out = corpus
    runs = {}
    for compiled in (False, True):
        spec = spec_of(steps=3, checkpoints=[0, 3], eval_every=3, compile=compiled)
        folder = tmp_path / str(compiled)
        runs[compiled] = train(
            spec,
            model_config(spec, tokenizer),
            tokenizer,
            sequences,
            held_out=held_out,
            folder=folder,
            device="cpu",
        )
    losses = [[row["train_loss"] for row in runs[c].curve[1:]] for c in (False, True)]
    assert len(losses[0]) == 3
    np.testing.assert_allclose(losses[1], losses[0], rtol=1e-5)
    eager, compiled = (weights(checkpoint_folder(tmp_path / str(c), 3)) for c in (False, True))
    assert eager.keys() == compiled.keys()
    for name in eager:
        np.testing.assert_allclose(compiled[name], eager[name], rtol=0, atol=2 * 3 * 3e-3)
    assert spec_of(compile=True).fingerprint(sequences) == spec_of().fingerprint(sequences)


def test_checkpoints_of_another_run_are_not_resumed(corpus, tmp_path) -> None:
    tokenizer, sequences, held_out = corpus
    spec = spec_of(steps=4, checkpoints=[0, 4])
    config = model_config(spec, tokenizer)
    train(spec, config, tokenizer, sequences, held_out=held_out, folder=tmp_path, device="cpu")
    other = spec_of(steps=4, checkpoints=[0, 4], seed=1)
    run = train(
        other, config, tokenizer, sequences, held_out=held_out, folder=tmp_path, device="cpu"
    )
    assert run.resumed_from is None
    saved = json.loads((checkpoint_folder(tmp_path, 4) / CHECKPOINT_FILE).read_text())
    assert saved["fingerprint"] == other.fingerprint(sequences, held_out)


def test_a_checkpoint_is_a_model_whose_loss_is_the_recorded_one(corpus, tmp_path) -> None:
    """The held-out loss a checkpoint records equals a direct ``labels=`` loss of the
    saved model on the same sequences."""
    from transformers import AutoModelForCausalLM

    tokenizer, sequences, held_out = corpus
    spec = spec_of(steps=4, checkpoints=[0, 4])
    train(
        spec,
        model_config(spec, tokenizer),
        tokenizer,
        sequences,
        held_out=held_out,
        folder=tmp_path,
        device="cpu",
    )
    folder = checkpoint_folder(tmp_path, 4)
    model = AutoModelForCausalLM.from_pretrained(folder).eval()
    ids = torch.from_numpy(held_out)
    with torch.no_grad():
        direct = model(input_ids=ids, labels=ids).loss.item()
    recorded = json.loads((folder / CHECKPOINT_FILE).read_text())
    assert recorded["held_out_loss"] == pytest.approx(direct, rel=1e-5)
    assert recorded["tokens_seen"] == 4 * spec.batch_size * spec.context


def test_unigram_cross_entropy_is_add_one_smoothed_frequencies() -> None:
    counts = np.array([2, 2, 0])  # the training tokens 0, 0, 1, 1 over 3 tokens
    held = np.array([[2, 0, 2]])  # predicted tokens: 0 and 2
    # counts + 1 over 3 tokens: 3, 3, 1 of 7
    expected = -(np.log(3 / 7) + np.log(1 / 7)) / 2
    assert unigram_cross_entropy(counts, held) == pytest.approx(expected)


ONE_STEP = """
import json, re, sys
from pathlib import Path
import torch
from transformers import Qwen2Config, Qwen2ForCausalLM

def peak():
    status = Path("/proc/self/status").read_text()
    return int(re.search(r"^VmHWM:\\s+(\\d+) kB$", status, re.M).group(1)) * 1024

sizes = json.loads(sys.argv[1])
torch.set_num_threads(1)  # no second thread's scratch buffers in the high-water mark
torch.manual_seed(0)
model = Qwen2ForCausalLM(Qwen2Config(vocab_size=64, **sizes["config"]))
ids = torch.randint(0, 64, (sizes["batch"], sizes["context"]))
model(input_ids=ids[:, :8], labels=ids[:, :8]).loss.backward()  # allocator and kernels warm
model.zero_grad()
before = peak()
model(input_ids=ids, labels=ids).loss.backward()
print(peak() - before)
"""


def test_the_planned_activations_hold_a_measured_backward_pass() -> None:
    """One forward and backward pass on the CPU of a Qwen2-type model (as Yao & Xu's) at
    4 × 512 tokens: the growth of its peak resident memory (the kernel's high-water mark,
    in a process of its own, on one thread: each further thread adds scratch buffers that
    are no activation, up to 127 MB seen with two on a loaded machine) is covered by
    ``activation_bytes``, within a factor of 2 (a plan that left the activations out, as
    before the rehearsal, or the attention probabilities, is below it)."""
    spec = spec_of(
        architecture="qwen2", num_layers=4, hidden_size=128, num_heads=4, head_dim=32,
        intermediate_size=256, context=512, batch_size=4,
    )  # fmt: skip
    sizes = {
        "config": {
            "num_hidden_layers": 4,
            "hidden_size": 128,
            "num_attention_heads": 4,
            "num_key_value_heads": 4,
            "head_dim": 32,
            "intermediate_size": 256,
            "max_position_embeddings": 512,
        },
        "batch": 4,
        "context": 512,
    }
    measured = subprocess.run(
        [sys.executable, "-c", ONE_STEP, json.dumps(sizes)],
        capture_output=True,
        text=True,
        check=True,
    )
    grown = int(measured.stdout.split()[-1])
    planned = activation_bytes(spec, on_gpu=False)
    assert 0 < grown <= planned <= 2 * grown, (grown, planned)
