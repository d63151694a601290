"""Each normalisation against torch's and transformers' own default-initialised norms."""

import numpy as np
import pytest
import torch
from transformers.models.llama.modeling_llama import LlamaRMSNorm

from layerlaws.equilearning.norms import NORMS, normalize


@pytest.fixture
def states() -> torch.Tensor:
    rng = np.random.default_rng(0)
    return torch.from_numpy(rng.normal(size=(50, 16)) * np.logspace(0, 3, 16) + 100)


def test_model_norm_of_a_layernorm_model_equals_default_torch_layernorm(states):
    reference = torch.nn.LayerNorm(16, eps=1e-5).double()(states).detach()
    torch.testing.assert_close(
        normalize(states, "model", "layernorm", 1e-5), reference, rtol=1e-10, atol=1e-12
    )


def test_model_norm_of_an_rmsnorm_model_equals_default_llama_rmsnorm(states):
    # LlamaRMSNorm computes in float32 whatever its input dtype: compare at that precision.
    reference = LlamaRMSNorm(16, eps=1e-6).double()(states).detach()
    torch.testing.assert_close(
        normalize(states, "model", "rmsnorm", 1e-6), reference, rtol=1e-6, atol=0
    )


def test_standardize_and_none(states):
    z = normalize(states, "standardize", "rmsnorm", 1e-6).numpy()
    np.testing.assert_allclose(z.mean(axis=1), 0, atol=1e-12)
    np.testing.assert_allclose(z.std(axis=1), 1, rtol=1e-12)
    constant = torch.full((2, 16), 3.0, dtype=torch.float64)
    assert normalize(constant, "standardize", "rmsnorm", 1e-6).abs().max() == 0
    assert normalize(states, "none", "rmsnorm", 1e-6) is states
    assert set(NORMS) == {"model", "standardize", "none"}
    with pytest.raises(ValueError, match="allowed"):
        normalize(states, "batch", "rmsnorm", 1e-6)
