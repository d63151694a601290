"""A float64 model kept in float64 (``layerlaws.models.precision.keep_float64``): the
RMS norm of a tiny Llama, which transformers computes in float32, against the norm
written out in numpy float64 (Zhang & Sennrich, 2019: x / √(mean(x²) + ε) · w)."""

from __future__ import annotations

import numpy as np
import torch
from tiny_models import tiny_family_model

from layerlaws.models.loading import load_model
from layerlaws.models.precision import keep_float64


def rms_norm(x: np.ndarray, weight: np.ndarray, eps: float) -> np.ndarray:
    return x / np.sqrt((x**2).mean(axis=-1, keepdims=True) + eps) * weight


def test_a_float64_models_norm_computes_in_float64(tokenizer, tmp_path):
    model = tiny_family_model("llama", tokenizer, tmp_path)
    norm = model.model.norm
    x = torch.randn(
        3,
        5,
        model.config.hidden_size,
        dtype=torch.float64,
        generator=torch.Generator().manual_seed(0),
    )
    expected = rms_norm(x.numpy(), norm.weight.detach().numpy(), norm.variance_epsilon)
    with torch.no_grad():
        lowered = norm(x).numpy()
        assert np.abs(lowered - expected).max() > 1e-9  # transformers' float32 norm
        assert keep_float64(model) is model
        keep_float64(model)  # once per model: a second call adds nothing
        kept = norm(x).numpy()
        whole = model(input_ids=torch.tensor([[1, 5, 9]])).logits
    assert kept.dtype == np.float64 and whole.dtype == torch.float64
    np.testing.assert_allclose(kept, expected, rtol=0, atol=1e-15 * np.abs(expected).max())


def test_a_float32_model_is_left_as_it_is(tokenizer, tmp_path):
    tiny_family_model("llama", tokenizer, tmp_path)
    model = load_model(tmp_path, "float32", "cpu", attention="eager")
    assert keep_float64(model) is model
    assert all(not module._forward_pre_hooks for module in model.modules())
