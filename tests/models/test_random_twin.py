"""The coupling's random twin drawn block by block (``layerlaws.models.random_twin``): the
same weights, bit for bit, as transformers' whole-model initialisation drawn in float32 on
the host and cast (``preparation.randomly_initialised``), for the families whose
initialisations differ in how they draw (Conv1D, orthogonal, re-drawn shared embeddings,
quantised layers), and the host holding about one block at a time while it is drawn."""

from __future__ import annotations

import json
import logging
import os
import subprocess
import sys

import pytest
import torch
from conftest import llama_tokenizer
from tiny_models import family_sizes, save_tiny_model

from layerlaws.models.loading import load_model
from layerlaws.models.preparation import randomly_initialised
from layerlaws.models.quantization import quantize_like
from layerlaws.models.random_twin import device_of, randomly_initialised_twin

SEED = 11
FAMILIES = (
    "llama",  # its model's pass before its LM head is built
    "gpt2",  # Conv1D, drawn again by its model for the scaled projections
    "gpt_neo",
    "gpt_neox",
    "falcon",
    "mpt",
    "gemma",
    "phi",
    "rwkv",  # orthogonal weights: torch draws nothing for them on the meta device
    "t5",  # shared embeddings drawn again by the model after both stacks
)


@pytest.fixture(scope="module")
def tokenizer(texts):
    return llama_tokenizer(texts)


def tensors(model) -> dict[str, torch.Tensor]:
    """Every parameter and buffer of ``model`` by name (persistent or not)."""
    return dict(model.named_parameters()) | dict(model.named_buffers())


def assert_same_weights(twin, reference) -> None:
    drawn, expected = tensors(twin), tensors(reference)
    assert drawn.keys() == expected.keys() and expected
    for name, tensor in expected.items():
        assert drawn[name].dtype == tensor.dtype and drawn[name].device == tensor.device, name
        assert torch.equal(drawn[name], tensor), name


def whole_twin(model, dtype: torch.dtype):
    """The reference: transformers' initialisation of the whole model in float32 on the
    host under the seed, cast to ``dtype``."""
    return randomly_initialised(model, SEED).to(dtype)


@pytest.mark.parametrize("dtype", ["float32", "bfloat16"])
@pytest.mark.parametrize("family", FAMILIES)
def test_the_twin_drawn_block_by_block_is_the_whole_models_twin(family, dtype, tokenizer, tmp_path):
    folder = save_tiny_model(tmp_path, family, tokenizer, **family_sizes(family))
    model = load_model(folder, dtype, "cpu", attention="eager")
    twin = randomly_initialised_twin(model, SEED)
    assert_same_weights(twin, whole_twin(model, getattr(torch, dtype)))
    assert not twin.training and not any(p.requires_grad for p in twin.parameters())
    # The host generator is left where the whole model's initialisation leaves it.
    state = torch.get_rng_state()
    whole_twin(model, torch.float32)
    assert torch.equal(state, torch.get_rng_state())


def test_a_family_whose_initialisation_keeps_its_constructors_draws_is_drawn_whole(
    tokenizer, tmp_path, caplog
):
    """OpenAI GPT's ``_init_weights`` leaves its Conv1D layers as their constructor drew
    them: the twin is drawn whole on the host, as before, and says so."""
    folder = save_tiny_model(tmp_path, "openai-gpt", tokenizer, **family_sizes("openai-gpt"))
    model = load_model(folder, "bfloat16", "cpu", attention="eager")
    with caplog.at_level(logging.WARNING, logger="layerlaws.models.random_twin"):
        twin = randomly_initialised_twin(model, SEED)
    assert "drawn whole on the host" in caplog.text and "c_attn.weight" in caplog.text
    assert_same_weights(twin, whole_twin(model, torch.bfloat16))


@pytest.mark.parametrize("quantization", ["nf4", "int8"])
def test_a_quantised_twin_is_the_whole_twin_quantised(quantization, tokenizer, tmp_path):
    """Each block quantised as it is placed holds what quantising the whole twin holds:
    the same packed weights and scales."""
    pytest.importorskip("bitsandbytes")
    folder = save_tiny_model(tmp_path, "llama", tokenizer, **family_sizes("llama"))
    model = load_model(folder, "bfloat16", "cpu", "eager", quantization)
    twin = randomly_initialised_twin(model, SEED)
    reference = quantize_like(whole_twin(model, torch.bfloat16), model).to("cpu")
    drawn, expected = twin.state_dict(), reference.state_dict()
    assert drawn.keys() == expected.keys()
    for name, tensor in expected.items():
        assert torch.equal(drawn[name], tensor), name
    kinds = {type(module).__name__ for module in twin.modules()}
    assert kinds & {"Linear4bit", "Linear8bitLt"}


def test_each_unit_goes_to_its_nearest_listed_ancestors_device():
    device_map = {"model.embed_tokens": 0, "model.layers.0": 0, "model.layers.1": 1, "": 2}
    assert device_of("model.layers.1", device_map, "cpu") == 1
    assert device_of("model.layers.10", device_map, "cpu") == 2  # not model.layers.1's
    assert device_of("model.layers.0.mlp", device_map, "cpu") == 0
    assert device_of("lm_head", {"model": 0}, "cuda:0") == "cuda:0"


HOST_PEAK = """
import json, sys, torch
from transformers import LlamaConfig
from layerlaws.models.preparation import skeleton_of
from layerlaws.models.random_twin import randomly_initialised_twin

def trained(**sizes):
    # The trained model on the meta device: the twin's units are sent there, and freed.
    config = LlamaConfig(num_attention_heads=8, vocab_size=1024, **sizes)
    return skeleton_of(config, False).to(torch.bfloat16)

randomly_initialised_twin(trained(hidden_size=64, intermediate_size=128, num_hidden_layers=2), 0)

def resident(field):
    with open("/proc/self/status") as status:
        line = next(line for line in status if line.startswith(field + ":"))
    return int(line.split()[1]) * 1024

model = trained(hidden_size=384, intermediate_size=1536, num_hidden_layers=16)
with open("/proc/self/clear_refs", "w") as clear:
    clear.write("5")  # the peak resident memory (VmHWM) starts again from here
before = resident("VmRSS")
twin = randomly_initialised_twin(model, 0)
peak = resident("VmHWM")
block = sum(p.numel() for p in model.model.layers[0].parameters()) * 4
print(json.dumps({
    "growth": peak - before,
    "block": block,
    "whole": sum(p.numel() for p in model.parameters()) * 4,
    "on_meta": all(p.is_meta for p in twin.parameters()),
}))
"""
SLACK = 32 * 2**20
"""Host memory beside the units: the allocator's rounding, the skeleton's bookkeeping."""
SMALL_MAPPED = {"MALLOC_MMAP_THRESHOLD_": str(64 * 2**10)}
"""glibc's malloc maps every allocation above 64 kB of its own, and unmaps it when freed.
A real model's weight matrices (64 MB and more from 4,096 wide) are above the 32 MB that
its threshold rises to at most; without this, the stand-in's megabyte matrices would be
carved from the heap, whose fragments stay resident once freed."""


def test_drawing_the_twin_holds_about_one_block_on_the_host():
    """A 16-block Llama of 154 MB in float32, its twin sent to the meta device (standing for
    the GPUs): the host's peak grows by at most two float32 blocks (one drawn, its cast
    and the checks' temporaries) plus ``SLACK``, far below the whole float32 twin that
    drawing it whole would hold. Measured in a fresh interpreter, whose peak resident
    memory is this draw's, its allocations mapped as a real model's are
    (``SMALL_MAPPED``)."""
    measured = json.loads(
        subprocess.run(
            [sys.executable, "-c", HOST_PEAK],
            capture_output=True,
            text=True,
            check=True,
            env=os.environ | SMALL_MAPPED,
        ).stdout
    )
    assert measured["on_meta"]
    assert measured["whole"] > 12 * measured["block"]
    assert measured["growth"] <= 2 * measured["block"] + SLACK, measured
