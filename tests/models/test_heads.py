"""The logit lens (``layerlaws.models.heads``) against the model's own forward pass.

At layer L the lens must give the model's own logits, ``model(input_ids).logits``, for
every kind of head: a final norm or none (post-LN GPT-1), a masked-LM head with its own
transform (BERT), the output scalings of Cohere, Granite, Gemma 2 and RecurrentGemma (set
here so that they change the logits by far more than the tolerance). At an intermediate
layer l it must give the logits of the same model cut after block l. The entropy and the
next-token loss are written here from the softmax with scipy, in float64.
"""

from __future__ import annotations

import numpy as np
import pytest
import scipy.special
import scipy.stats
import torch
from tiny_models import tiny_config

from layerlaws.models.architectures import auto_class
from layerlaws.models.blocks import trace_blocks
from layerlaws.models.heads import head_logits, lens_entropy_and_loss

FAMILIES = {
    "llama": {},
    "gpt2": {},
    "openai-gpt": {},
    "mamba": {},
    "bert": {},
    "cohere": {"logit_scale": 4.0},
    "granite": {"logits_scaling": 0.25},
    "gemma2": {"final_logit_softcapping": 0.05},
    "recurrent_gemma": {"logits_soft_cap": 0.05},
}
"""Families with each kind of head, and the output scaling they are built with."""
IDS = torch.tensor([[1, 5, 9, 14, 3, 7, 22, 4]])


def tiny_model(family: str, tokenizer, **options) -> torch.nn.Module:
    torch.manual_seed(0)
    config = tiny_config(family, tokenizer, num_hidden_layers=3, **options)
    return auto_class(family).from_config(config).float().eval()


def reference_entropy_and_loss(logits: np.ndarray, ids: np.ndarray) -> tuple[np.ndarray, ...]:
    """Entropy of softmax(logits) (T,) and −log p of the next token (T − 1,), nats."""
    probabilities = scipy.special.softmax(logits.astype(np.float64), axis=-1)
    entropy = scipy.stats.entropy(probabilities, axis=-1)
    loss = -np.log(probabilities[np.arange(len(ids) - 1), ids[1:]])
    return entropy, loss


@pytest.mark.parametrize("family", FAMILIES)
@pytest.mark.parametrize("final_norm", [True, False])
def test_the_lens_at_the_last_layer_is_the_models_own_output(family, final_norm, tokenizer):
    model = tiny_model(family, tokenizer, **FAMILIES[family])
    with torch.no_grad():
        expected = model(input_ids=IDS).logits[0].double().numpy()
    _, streams = trace_blocks(model, IDS, final_norm)
    logits = head_logits(model, streams[-1], normed=final_norm)
    np.testing.assert_allclose(logits.double().numpy(), expected, atol=2e-5)
    entropy, loss = lens_entropy_and_loss(model, streams, IDS[0], normed_last=final_norm)
    reference_entropy, reference_loss = reference_entropy_and_loss(expected, IDS[0].numpy())
    assert entropy.shape == loss.shape == (4, IDS.shape[1])
    np.testing.assert_allclose(entropy[-1], reference_entropy, atol=1e-6)
    np.testing.assert_allclose(loss[-1, :-1], reference_loss, atol=1e-6)
    assert np.isnan(loss[:, -1]).all()


@pytest.mark.parametrize("family", ["llama", "gpt2"])
def test_the_lens_at_layer_l_is_the_model_cut_after_block_l(family, tokenizer):
    model = tiny_model(family, tokenizer)
    _, streams = trace_blocks(model, IDS)
    entropy, loss = lens_entropy_and_loss(model, streams, IDS[0], normed_last=True)
    blocks = model.model if family == "llama" else model.transformer
    name = "layers" if family == "llama" else "h"
    full = getattr(blocks, name)
    cut_logits = []
    for layer in (1, 2):
        setattr(blocks, name, full[:layer])
        with torch.no_grad():
            expected = model(input_ids=IDS).logits[0].double().numpy()
        setattr(blocks, name, full)
        cut_logits.append(expected)
        lens = head_logits(model, streams[layer], normed=False).double().numpy()
        np.testing.assert_allclose(lens, expected, atol=2e-5)
        reference_entropy, reference_loss = reference_entropy_and_loss(expected, IDS[0].numpy())
        np.testing.assert_allclose(entropy[layer], reference_entropy, atol=1e-6)
        np.testing.assert_allclose(loss[layer, :-1], reference_loss, atol=1e-6)
    assert np.abs(cut_logits[0] - cut_logits[1]).max() > 1e-2  # the cut changes the logits
