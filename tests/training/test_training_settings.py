"""The optimizer settings of a training reach its weights: a few steps with a seed, learning
rate, weight decay, betas, gradient clip and evaluation interval other than the defaults,
against the same steps written here with transformers and torch.optim.AdamW (the settings'
reading and checking is tested for every stage in tests/core/test_settings.py; the
learning-rate schedule, data order and packing in tests/training/test_training.py)."""

from __future__ import annotations

import numpy as np
import torch
from conftest import TINY_TRAINING
from safetensors.torch import load_file

from layerlaws.training.plan import TrainingSpec, checkpoint_folder
from layerlaws.training.train import model_config, train

CHANGES = {
    "seed": 3,
    "learning_rate": 1e-2,
    "warmup_steps": 1,
    "final_learning_rate": 1.0,
    "weight_decay": 0.3,
    "betas": [0.8, 0.9],
    "grad_clip": 0.05,
    "steps": 3,
    "checkpoints": [0, 3],
    "eval_every": 2,
}
"""Settings other than the defaults (and TINY_TRAINING's); warmup_steps 1 and
final_learning_rate 1 keep the rate at learning_rate for every step."""


def reference_weights(config, sequences: np.ndarray) -> dict[str, torch.Tensor]:
    """The weights after CHANGES' steps, from CHANGES' values themselves: transformers'
    initialisation of ``config`` under ``torch.manual_seed(seed)`` in float32; step s reads
    the packed sequences at positions s·b … (s + 1)·b − 1 (b = batch_size) of its epoch's
    permutation, ``numpy.random.default_rng([seed, epoch]).permutation``; the mean
    next-token loss (``labels=``), its gradient clipped to the norm grad_clip, AdamW with
    the weight decay on matrices only."""
    from transformers import AutoModelForCausalLM

    torch.manual_seed(CHANGES["seed"])
    model = AutoModelForCausalLM.from_config(config, dtype=torch.float32)
    matrices = [p for p in model.parameters() if p.dim() >= 2]
    others = [p for p in model.parameters() if p.dim() < 2]
    optimizer = torch.optim.AdamW(
        [
            {"params": matrices, "weight_decay": CHANGES["weight_decay"]},
            {"params": others, "weight_decay": 0.0},
        ],
        lr=CHANGES["learning_rate"],
        betas=tuple(CHANGES["betas"]),
    )
    size = TINY_TRAINING["batch_size"]
    for step in range(CHANGES["steps"]):
        epoch, within = divmod(step, len(sequences) // size)
        order = np.random.default_rng([CHANGES["seed"], epoch]).permutation(len(sequences))
        batch = torch.from_numpy(sequences[order[within * size : (within + 1) * size]])
        model(input_ids=batch, labels=batch).loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), CHANGES["grad_clip"])
        optimizer.step()
        optimizer.zero_grad()
    return {name: tensor.detach() for name, tensor in model.state_dict().items()}


def test_the_optimizer_settings_reach_the_weights(corpus, tmp_path) -> None:
    """The last checkpoint's weights against ``reference_weights`` (the same float32
    operations in the same order); the held-out loss every eval_every steps, at the
    checkpoints and at the last step."""
    tokenizer, sequences, held_out = corpus
    spec = TrainingSpec.of({**TINY_TRAINING, **CHANGES})
    config = model_config(spec, tokenizer)
    run = train(
        spec, config, tokenizer, sequences, held_out=held_out, folder=tmp_path, device="cpu"
    )
    found = load_file(str(checkpoint_folder(tmp_path, 3) / "model.safetensors"))
    expected = reference_weights(config, np.asarray(sequences, dtype=np.int64))
    assert found and set(found) <= set(expected)
    for name, tensor in found.items():
        np.testing.assert_allclose(
            tensor.numpy(), expected[name].numpy(), rtol=1e-6, atol=1e-7, err_msg=name
        )
    evaluated = [row["step"] for row in run.curve if row["held_out_loss"] is not None]
    assert evaluated == [0, 2, 3]
