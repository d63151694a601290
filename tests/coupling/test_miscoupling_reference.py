"""The depth table's mis-coupling against Aubry et al.'s definition, from the model itself.

For the tiny Llama of the workflow tests (four blocks), trained weights and the random
twin, two prompts: ``measure_prompts`` and ``combine`` (called as
scripts/measure_coupling.py calls them) give M[l, l′] = m̃(U′_Kᵀ J^l V′_K) of the last
token's self-Jacobians. The reference takes each J^l = ∂x^l_T / ∂x^{l−1}_T − I (the
residual branch's Jacobian, §3; the last block including the final norm, Eq. 7) by
torch.autograd through the whole model (``tests/whole_model_jacobians.py``), its top-K
singular vectors by numpy.linalg.svd, and m̃(A) = ‖A − Diag A‖_F / ‖A‖_F (Eq. 14) in
float64. Both run in float64, so the bound (1e-9) leaves only rounding, amplified by how
near the K-th and (K+1)-th singular values are.
"""

from __future__ import annotations

import numpy as np
import polars as pl
import pytest
import torch
from coupling_runs import measure_prompts
from transformers import AutoConfig, AutoModelForCausalLM
from whole_model_jacobians import reference_step_jacobian, scanned_blocks

from layerlaws.coupling.settings import CouplingSettings

pytestmark = pytest.mark.slow

PROMPTS = [[1, 5, 9, 14, 3, 7], [1, 22, 8, 30, 11]]
KS = (2, 4)
BOUND = 1e-9


def reference_depth_jacobians(model, ids: torch.Tensor) -> list[np.ndarray]:
    """J^l (d, d) of the last token for l = 1..L, from whole-model Jacobians at the
    streams the model itself reports entering each block (transformers'
    ``hidden_states``: the embeddings, then each block's output)."""
    with torch.no_grad():
        streams = model(input_ids=ids, output_hidden_states=True).hidden_states
    last, width = ids.shape[1] - 1, model.config.hidden_size
    return [
        reference_step_jacobian(model, ids, block, streams[block][0])[last, :, last, :].numpy()
        - np.eye(width)
        for block in range(len(scanned_blocks(model)))
    ]


def reference_miscoupling(jacobian: np.ndarray, other: np.ndarray, k: int) -> float:
    """m̃(U′_Kᵀ J V′_K), U′, V′ the top-k singular vectors of ``other``."""
    u, _, vh = np.linalg.svd(other)
    coupling = u[:, :k].T @ jacobian @ vh[:k].T
    return float(np.linalg.norm(coupling - np.diag(np.diag(coupling))) / np.linalg.norm(coupling))


@pytest.fixture(scope="module")
def measured(llama_folder):
    twins, result = measure_prompts(llama_folder, PROMPTS, CouplingSettings(ks=KS), "float64")
    return twins, result.depth


def test_depth_miscoupling_follows_the_definition(measured):
    twins, depth = measured
    if "metric" in depth.columns:
        depth = depth.filter(pl.col("metric") == "paper")
    found, expected_values = [], []
    for weights, model in twins.items():
        per_prompt = []
        for index, prompt in enumerate(PROMPTS):
            jacobians = reference_depth_jacobians(model, torch.tensor([prompt]))
            reference = {
                (a + 1, b + 1, k): reference_miscoupling(jacobians[a], jacobians[b], k)
                for k in KS
                for a in range(len(jacobians))
                for b in range(len(jacobians))
            }
            per_prompt.append(reference)
            rows = depth.filter((pl.col("weights") == weights) & (pl.col("prompt") == str(index)))
            assert rows.height == len(reference)
            for row in rows.iter_rows(named=True):
                found.append(row["miscoupling"])
                expected_values.append(reference[row["layer_a"], row["layer_b"], row["k"]])
        means = depth.filter((pl.col("weights") == weights) & (pl.col("prompt") == "mean"))
        assert means.height == len(per_prompt[0])
        for row in means.iter_rows(named=True):
            key = row["layer_a"], row["layer_b"], row["k"]
            found.append(row["miscoupling"])
            expected_values.append(np.mean([reference[key] for reference in per_prompt]))
    found, expected_values = np.array(found), np.array(expected_values)
    assert found.size == 2 * 3 * 2 * 16 and np.isfinite(expected_values).all()
    np.testing.assert_allclose(found, expected_values, rtol=0, atol=BOUND, err_msg="m̃")
    largest = np.abs(found - expected_values).max()
    print(f"\n{found.size} m̃ values, largest |difference| {largest:.1e}")


def test_the_random_twin_is_a_fresh_initialisation_of_the_models_config(measured, llama_folder):
    """The weights the ``random`` rows are measured on: transformers' own initialisation
    of the model's config under ``torch.manual_seed(init_seed)``, in float64."""
    twins, _ = measured
    torch.manual_seed(CouplingSettings().init_seed)
    config = AutoConfig.from_pretrained(llama_folder)
    fresh = AutoModelForCausalLM.from_config(config).to(torch.float64).state_dict()
    twin = twins["random"].state_dict()
    assert fresh.keys() == twin.keys() and fresh
    for name, tensor in fresh.items():
        assert torch.equal(twin[name], tensor), name
