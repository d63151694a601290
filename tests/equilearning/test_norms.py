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


@pytest.mark.parametrize(("norm_type", "eps"), [("rmsnorm", 1e-6), ("layernorm", 1e-5)])
def test_model_norm_uses_the_models_own_eps_where_it_matters(norm_type, eps):
    """Hidden states small enough (mean square about 1e-6) that the eps under the square
    root changes the result: the ``model`` norm against torch's functional norm in float64
    with the model's own eps. The other common eps (1e-5 against 1e-6) would give values
    that differ by far more than the tolerance."""
    rng = np.random.default_rng(1)
    small = torch.from_numpy(rng.normal(size=(40, 16)) * 1e-3)
    reference = {
        "rmsnorm": lambda e: torch.nn.functional.rms_norm(small, (16,), eps=e),
        "layernorm": lambda e: torch.nn.functional.layer_norm(small, (16,), eps=e),
    }[norm_type]
    other = 1e-5 if eps == 1e-6 else 1e-6
    assert (reference(eps) - reference(other)).abs().max() > 0.1
    np.testing.assert_allclose(
        normalize(small, "model", norm_type, eps).numpy(),
        reference(eps).numpy(),
        rtol=1e-10,
        atol=1e-12,
    )
