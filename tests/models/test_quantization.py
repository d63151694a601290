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
from whole_model_jacobians import assert_blocks_jacobians

from layerlaws.core.errors import LayerlawsError
from layerlaws.forward.costs import ModelSize, weights_bytes
from layerlaws.models.loading import load_model, randomly_initialised_twin
from layerlaws.models.placement import tensor_bytes
from layerlaws.models.preparation import skeleton_of
from layerlaws.models.quantization import (
    WEIGHT_BYTES,
    check_quantized,
    quantization_config,
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


def four_bit_types(model) -> set[str]:
    """The bitsandbytes 4-bit quantisation types of ``model``'s quantised weights."""
    return {
        module.weight.quant_type
        for name, module in model.named_modules()
        if name in quantized_modules(model) and hasattr(module.weight, "quant_type")
    }


@pytest.mark.parametrize("quantization", ["nf4", "fp4"])
def test_a_four_bit_setting_is_the_bitsandbytes_quantisation_type(quantization):
    """nf4 and fp4 are transformers' BitsAndBytesConfig of that bnb_4bit_quant_type (fp4:
    what load_in_4bit quantises to when no type is given, as Aubry et al.'s demo loads),
    computing in the model's dtype."""
    config = quantization_config(quantization, torch.bfloat16)
    assert (config.load_in_4bit, config.load_in_8bit) == (True, False)
    assert config.bnb_4bit_quant_type == quantization
    assert config.bnb_4bit_compute_dtype == torch.bfloat16
    from transformers import BitsAndBytesConfig

    assert BitsAndBytesConfig(load_in_4bit=True).bnb_4bit_quant_type == "fp4"
    assert quantization_config("none", torch.float32) is None
    assert quantization_config("int8", torch.float32).load_in_8bit


@pytest.mark.parametrize("quantization", ["nf4", "fp4", "int8"])
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

    four_bit = {quantization} if quantization in ("nf4", "fp4") else set()
    assert four_bit_types(model) == four_bit

    twin = randomly_initialised_twin(model, init_seed=1)  # the tiny model is seed 0
    assert quantized_modules(twin) == quantized_modules(model)
    assert four_bit_types(twin) == four_bit
    kinds = {type(module) for name, module in twin.named_modules() if name in linear_layers(plain)}
    assert kinds == {type(model.get_submodule(linear_layers(plain)[0]))}
    with torch.no_grad():
        random = twin(ids).logits
    assert torch.isfinite(random).all() and not torch.allclose(random, quantised)


@pytest.mark.parametrize("quantization", ["nf4", "fp4"])
def test_a_quantised_blocks_jacobians_are_its_own(folder, quantization):
    """4-bit weights (nf4, and fp4 as Aubry et al.'s demo loads) in float32: both product
    paths (token-local, not fallen back) against the whole-model reference, to float32's
    bound."""
    model = load_model(folder, "float32", "cpu", "eager", quantization)
    assert four_bit_types(model) == {quantization}
    assert_blocks_jacobians(model, torch.tensor([PROMPT]), 1e-5)


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
