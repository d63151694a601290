"""Which stream our layer l is, against transformers' ``output_hidden_states``: for every
family our layer 0 is the embeddings and layer l the stream after block l (layer L after
the final norm). Transformers' own tuple agrees for attention models (index i = layer i),
but for Mamba and RWKV it holds no embeddings: its index i is the stream after block i + 1
(the last, the final norm's output). He & Su's released code drops index 0, so for these
two families its first layer is the output of block 2 (docs/numerics.md); under
``LayerChoice(hidden_states=True)`` (``equilearning.layer_states: hidden_states``) our
layer l is transformers' index l for every family."""

import pytest
import torch
from tiny_models import tiny_family_model

from layerlaws.models.architectures import BLOCK_INPUTS, LayerChoice
from layerlaws.models.blocks import layer_states

PROMPT = [1, 5, 9, 14, 3]


def ours_and_transformers(family, tokenizer, folder, choice=BLOCK_INPUTS):
    model = tiny_family_model(family, tokenizer, folder)
    ours = {}

    def record(layer, states):
        ours[layer] = states.clone()

    with torch.no_grad(), layer_states(model, record, choice):
        output = model(input_ids=torch.tensor([PROMPT]), output_hidden_states=True)
    embeddings = model.get_input_embeddings()(torch.tensor([PROMPT]))
    return model, ours, output.hidden_states, embeddings


@pytest.mark.parametrize("family", ["llama", "gpt2"])
def test_an_attention_models_hidden_states_are_our_layers(family, tokenizer, tmp_path):
    model, ours, hidden, _ = ours_and_transformers(family, tokenizer, tmp_path)
    layers = model.config.num_hidden_layers
    assert sorted(ours) == list(range(layers + 1)) and len(hidden) == layers + 1
    for layer in range(layers + 1):
        torch.testing.assert_close(ours[layer], hidden[layer], rtol=0, atol=1e-6)


@pytest.mark.parametrize("family", ["mamba", "rwkv"])
def test_a_recurrent_models_hidden_states_start_after_its_first_block(family, tokenizer, tmp_path):
    model, ours, hidden, embeddings = ours_and_transformers(family, tokenizer, tmp_path)
    layers = model.config.num_hidden_layers
    assert sorted(ours) == list(range(layers + 1)) and len(hidden) == layers + 1
    torch.testing.assert_close(ours[0], embeddings, rtol=0, atol=1e-6)
    for index in range(layers - 1):  # index i: after block i + 1
        torch.testing.assert_close(ours[index + 1], hidden[index], rtol=0, atol=1e-6)
    torch.testing.assert_close(ours[layers], hidden[layers], rtol=0, atol=1e-6)
    assert not torch.allclose(hidden[0], embeddings)


@pytest.mark.parametrize("family", ["mamba", "rwkv", "llama"])
def test_under_hidden_states_our_layers_are_transformers_hidden_states(family, tokenizer, tmp_path):
    """He & Su's numbering: index l of transformers' tuple is our layer l, for Mamba and
    RWKV too (the output of block l + 1; layers L − 1 and L the last block's output before
    and after the final norm)."""
    choice = LayerChoice(hidden_states=True)
    model, ours, hidden, _ = ours_and_transformers(family, tokenizer, tmp_path, choice)
    layers = model.config.num_hidden_layers
    assert sorted(ours) == list(range(layers + 1)) and len(hidden) == layers + 1
    for layer in range(layers + 1):
        torch.testing.assert_close(ours[layer], hidden[layer], rtol=0, atol=1e-6)
