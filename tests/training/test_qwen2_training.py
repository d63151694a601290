"""Yao & Xu's language models (Appendix A): a Qwen2-style architecture whose heads need not
add up to the hidden size, weight matrices drawn from N(0, 1/d_in), and a few training
steps of such a model."""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch
import yaml
from conftest import TINY_TRAINING, llama_tokenizer

from layerlaws.core.errors import LayerlawsError
from layerlaws.core.settings import SCHEMA_FILE
from layerlaws.training.plan import INITIALISATIONS, TrainingSpec, parameter_count
from layerlaws.training.train import (
    CHECKPOINT_FILE,
    initial_model,
    model_config,
    packed_texts,
    train,
)

SETTINGS = TINY_TRAINING | {
    "architecture": "qwen2",
    "hidden_size": 64,
    "num_heads": 3,
    "head_dim": 8,
    "intermediate_size": 128,
    "tie_embeddings": False,
    "init": "normal_fan_in",
    "checkpoints": [0, 12],
}
"""A tiny Qwen2 with Yao & Xu's shape of attention: 3 heads of 8 (width 24) on hidden 64."""


def spec_of(**changes) -> TrainingSpec:
    return TrainingSpec.of({**SETTINGS, **changes})


def test_qwen2_model_has_the_head_size_asked_for(texts) -> None:
    tokenizer = llama_tokenizer(texts)
    spec = spec_of()
    model = initial_model(spec, model_config(spec, tokenizer))
    assert type(model).__name__ == "Qwen2ForCausalLM"
    attention = model.model.layers[0].self_attn
    assert model.config.head_dim == 8
    assert tuple(attention.q_proj.weight.shape) == (3 * 8, 64)
    assert tuple(attention.o_proj.weight.shape) == (64, 3 * 8)
    assert attention.q_proj.bias is not None and attention.o_proj.bias is None
    assert parameter_count(spec, len(tokenizer)) == sum(p.numel() for p in model.parameters())
    ids = torch.tensor([tokenizer("the law of the layers")["input_ids"]])
    assert model(input_ids=ids).logits.shape == (1, ids.shape[1], len(tokenizer))


def test_head_size_defaults_to_the_hidden_share_and_gpt2_heads_fill_it() -> None:
    assert spec_of(head_dim=None, num_heads=4).head_dim == 16
    with pytest.raises(LayerlawsError, match="give head_dim"):
        spec_of(head_dim=None)  # 64 is no multiple of 3
    for architecture in ("gpt2", "llama"):  # transformers' Llama checks it too
        with pytest.raises(LayerlawsError, match="share hidden_size"):
            spec_of(architecture=architecture)


def paper_input_dimension(name: str, shape: tuple[int, ...]) -> int:
    """d_in of a weight matrix as Yao & Xu write it, from its name and stored shape: an
    embedding table (V, d) maps a one-hot token (or position) of size V; a torch linear
    map is stored (out, in); GPT-2's Conv1D maps are stored (in, out)."""
    if name.endswith(("embed_tokens.weight", "wte.weight", "wpe.weight")):
        return shape[0]
    if "transformer.h." in name:
        return shape[0]
    return shape[1]


def fan_in_misfits(model: torch.nn.Module) -> list[str]:
    """The weight matrices whose entries do not look like N(0, 1/d_in): sample standard
    deviation off 1/sqrt(d_in) by more than 6 standard errors (1/sqrt(2n) relative, for n
    normal entries), or sample mean off 0 by more than 6 standard errors."""
    misfits = []
    for name, weight in model.named_parameters():
        if weight.dim() != 2:
            continue
        values = weight.detach().double().numpy().ravel()
        sigma = paper_input_dimension(name, tuple(weight.shape)) ** -0.5
        n = values.size
        if abs(values.std() / sigma - 1) > 6 / np.sqrt(2 * n) or abs(
            values.mean()
        ) > 6 * sigma / np.sqrt(n):
            misfits.append(name)
    return misfits


@pytest.mark.parametrize(
    ("architecture", "tied"), [("qwen2", False), ("qwen2", True), ("gpt2", True)]
)
def test_normal_fan_in_draws_each_matrix_with_variance_one_over_its_input(
    texts, architecture, tied
) -> None:
    tokenizer = llama_tokenizer(texts)
    changes = {"architecture": architecture, "tie_embeddings": tied}
    if architecture == "gpt2":
        changes |= {"num_heads": 4, "head_dim": None}
    spec = spec_of(**changes)
    config = model_config(spec, tokenizer)
    drawn = initial_model(spec, config)
    assert fan_in_misfits(drawn) == []
    # Biases start at zero and norms at one, as transformers leaves them.
    for name, parameter in drawn.named_parameters():
        if name.endswith("bias"):
            assert torch.count_nonzero(parameter) == 0, name
        elif "norm" in name or ".ln_" in name:
            assert torch.all(parameter == 1), name
    # transformers' own initialisation (std 0.02) is not the paper's, and the check sees it.
    default = initial_model(spec_of(**changes, init="default"), config)
    assert fan_in_misfits(default) != []
    # The draw is seeded.
    again = initial_model(spec, config)
    assert all(
        torch.equal(a, b) for a, b in zip(drawn.parameters(), again.parameters(), strict=True)
    )


def test_schema_lists_the_initialisations() -> None:
    schema = yaml.safe_load(SCHEMA_FILE.read_text())
    training = schema["properties"]["training"]["additionalProperties"]["properties"]
    assert tuple(training["init"]["enum"]) == INITIALISATIONS


def test_a_qwen2_model_trains_and_its_checkpoint_loads(texts, tmp_path) -> None:
    from transformers import AutoModelForCausalLM

    tokenizer = llama_tokenizer(texts)
    spec = spec_of()
    sequences = packed_texts(tokenizer, texts[:60], spec.context)
    held_out = packed_texts(tokenizer, texts[60:], spec.context)[:4]
    run = train(
        spec,
        model_config(spec, tokenizer),
        tokenizer,
        sequences,
        held_out=held_out,
        folder=tmp_path,
        device="cpu",
    )
    losses = [row["held_out_loss"] for row in run.checkpoints]
    assert np.isfinite(losses).all() and losses[-1] < losses[0]
    final = tmp_path / "step_000012"
    assert json.loads((final / CHECKPOINT_FILE).read_text())["step"] == 12
    loaded = AutoModelForCausalLM.from_pretrained(final)
    assert type(loaded).__name__ == "Qwen2ForCausalLM" and loaded.config.head_dim == 8
