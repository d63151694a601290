"""Quantised weights (``models.<key>.quantization``): bitsandbytes quantises every linear
layer but the output embeddings as the model loads (on the CPU too), the random twin is
quantised like the model, a quantised block's Jacobians are its own (token-local and
whole-sequence products against the whole-model autograd reference), the planner and the
placement size quantised weights, and what cannot run says why."""

import sys

import numpy as np
import pytest
import torch
from tiny_models import save_tiny_model
from whole_model_jacobians import (
    pipeline_step_jacobian,
    reference_step_jacobian,
    relative_difference,
)

from layerlaws.core.errors import LayerlawsError
from layerlaws.forward.costs import ModelSize, weights_bytes
from layerlaws.models.loading import load_model, randomly_initialised_twin
from layerlaws.models.placement import tensor_bytes
from layerlaws.models.preparation import skeleton_of
from layerlaws.models.quantization import (
    WEIGHT_BYTES,
    check_quantized,
    quantized_modules,
    stage_quantization,
)

PROMPT = [1, 5, 9, 14, 3]
SIZES = {
    "hidden_size": 64,  # bitsandbytes' CPU kernels pack rows in blocks of 32
    "intermediate_size": 128,
    "num_hidden_layers": 2,
    "num_attention_heads": 4,
    "max_position_embeddings": 64,
}


@pytest.fixture(scope="module")
def folder(tokenizer, tmp_path_factory):
    return save_tiny_model(tmp_path_factory.mktemp("quantised"), "llama", tokenizer, **SIZES)


def linear_layers(model) -> list[str]:
    head = model.get_output_embeddings()
    return [
        name
        for name, module in model.named_modules()
        if isinstance(module, torch.nn.Linear) and module is not head
    ]


@pytest.mark.parametrize("quantization", ["nf4", "int8"])
def test_a_quantised_model_and_its_random_twin(folder, quantization):
    plain = load_model(folder, "float32", "cpu", "eager")
    model = load_model(folder, "float32", "cpu", "eager", quantization)
    assert quantized_modules(plain) == []
    assert quantized_modules(model) == linear_layers(plain) and len(linear_layers(plain)) == 14
    ids = torch.tensor([PROMPT])
    with torch.no_grad():
        exact, quantised = plain(ids).logits, model(ids).logits
    error = ((quantised - exact).abs().max() / exact.abs().max()).item()
    assert torch.isfinite(quantised).all()
    assert 1e-4 < error < 0.2, f"{quantization}: logits moved by {error:.1e} of their scale"

    twin = randomly_initialised_twin(model, init_seed=1)  # the tiny model is seed 0
    assert quantized_modules(twin) == quantized_modules(model)
    kinds = {type(module) for name, module in twin.named_modules() if name in linear_layers(plain)}
    assert kinds == {type(model.get_submodule(linear_layers(plain)[0]))}
    with torch.no_grad():
        random = twin(ids).logits
    assert torch.isfinite(random).all() and not torch.allclose(random, quantised)


def test_a_quantised_blocks_jacobians_are_its_own(folder):
    """nf4 weights in float32: both product paths (token-local, not fallen back) against
    the whole-model reference, to float32's bound."""
    model = load_model(folder, "float32", "cpu", "eager", "nf4")
    ids = torch.tensor([PROMPT])
    for block in (0, 1):
        whole, streams = pipeline_step_jacobian(model, ids, block)
        local, _ = pipeline_step_jacobian(model, ids, block, local=True)
        assert local is not None, "a quantised Llama block fell back to whole-sequence products"
        reference = reference_step_jacobian(model, ids, block, streams[block])
        assert torch.isfinite(reference).all() and reference.abs().max() > 0
        for path, found in (("whole-sequence", whole), ("token-local", local)):
            error = relative_difference(found, reference)
            assert error <= 1e-5, f"block {block}, {path}: {error:.1e}"


def test_what_cannot_run_says_why(folder, monkeypatch):
    plain = load_model(folder, "float32", "cpu")
    with pytest.raises(LayerlawsError, match=r"quantised no layer of this 'llama' model"):
        check_quantized(plain, "nf4")
    check_quantized(plain, "none")
    monkeypatch.setitem(sys.modules, "bitsandbytes", None)
    with pytest.raises(LayerlawsError, match=r"quantization needs bitsandbytes.*\[quantization\]"):
        load_model(folder, "float32", "cpu", quantization="nf4")


def test_quantised_weights_are_sized_before_loading(folder):
    """The placement's bytes per tensor and the planner's bytes per model."""
    plain = load_model(folder, "float32", "cpu")
    skeleton = skeleton_of(plain.config, False)
    full, quantised = (tensor_bytes(skeleton, torch.bfloat16, q) for q in ("none", "nf4"))
    assert full.keys() == quantised.keys() and full
    for name, size in full.items():
        module = name.rpartition(".")[0]
        numel = size // 2
        expected = numel * WEIGHT_BYTES["nf4"] if module in linear_layers(plain) else size
        np.testing.assert_allclose(quantised[name], expected, rtol=0, atol=1)

    size = ModelSize(parameters=8_030_261_248, num_layers=32, hidden_size=4096, vocab_size=128256)
    embeddings = 2 * 128256 * 4096
    assert weights_bytes(size, "bfloat16") == size.parameters * 2
    assert weights_bytes(size, "bfloat16", "nf4") == pytest.approx(
        (size.parameters - embeddings) * 0.5625 + embeddings * 2, rel=1e-9
    )
    assert weights_bytes(size, "float32", "int8") < weights_bytes(size, "bfloat16")


def test_the_setting_is_one_value_or_one_per_stage():
    assert stage_quantization({}, "coupling") == "none"
    assert stage_quantization({"quantization": "int8"}, "passes") == "int8"
    per_stage = {"quantization": {"coupling": "nf4"}}
    assert [stage_quantization(per_stage, s) for s in ("passes", "coupling")] == ["none", "nf4"]
