"""The coupling metrics against references written here in NumPy: the paper's m̃ (Aubry
et al., Eq. 14) and the authors' released code's (``metrics.py``: the difference of |A|
from the Jacobian's own top-K singular values, over their trace or their 2-norm, with
U′ and V′ in both orientations), on random Jacobians and on a tiny model's coupling run
whose Jacobians the reference takes as the released code does, from consecutive
``hidden_states`` (J − I, by autograd)."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from layerlaws.core.errors import LayerlawsError
from layerlaws.core.settings import allowed
from layerlaws.coupling.measurement import TokenCoupling, measure_prompt
from layerlaws.coupling.miscoupling import METRICS, miscoupling_matrices
from layerlaws.coupling.settings import CouplingSettings
from layerlaws.models.loading import load_model

RELEASED_METRICS = {
    "released_trace": ("trace", False),
    "released_norm": ("norm", False),
    "released_trace_swapped": ("trace", True),
    "released_norm_swapped": ("norm", True),
}


def reference_metric(metric: str, jacobian: np.ndarray, other: np.ndarray, k: int) -> float:
    """``metric`` of J = ``jacobian`` coupled with the top-k singular vectors of
    ``other``: the paper's ‖A − Diag A‖_F / ‖A‖_F of A = U′ᵀ J V′ or its unnormalised
    ‖A − Diag A‖_F, or the released
    ‖|M| − diag(s)‖_F / Σ s (trace) or / ‖s‖_2 (norm) with s the top-k singular values of
    J and M = U′ᵀ J V′ (or V′ᵀ J U′ swapped)."""
    u, _, vh = np.linalg.svd(other.astype(np.float64))
    left, right = u[:, :k], vh[:k].T
    if metric in ("paper", "unnormalised"):  # Eqs. 14 and 13
        a = left.T @ jacobian @ right
        off = np.linalg.norm(a - np.diag(np.diag(a)))
        return float(off / np.linalg.norm(a) if metric == "paper" else off)
    normaliser, swapped = RELEASED_METRICS[metric]
    if swapped:
        left, right = right, left
    values = np.linalg.svd(jacobian.astype(np.float64), compute_uv=False)[:k]
    difference = np.linalg.norm(np.abs(left.T @ jacobian @ right) - np.diag(values))
    return float(difference / (values.sum() if normaliser == "trace" else np.sqrt(values @ values)))


def test_the_metrics_are_the_paper_and_the_released_ones_as_the_schema_names_them():
    assert ("paper", "unnormalised", *RELEASED_METRICS) == tuple(METRICS)
    assert allowed("coupling.metrics") == tuple(METRICS)


def test_every_metric_matches_its_reference_on_random_jacobians():
    """Jacobians sharing part of their singular vectors (so that the metrics are neither 0
    nor those of unrelated matrices), float64."""
    rng = np.random.default_rng(0)
    d, n = 24, 4
    u, _ = np.linalg.qr(rng.normal(size=(d, d)))
    v, _ = np.linalg.qr(rng.normal(size=(d, d)))
    jacobians = [
        u @ np.diag(np.sort(rng.gamma(2.0, size=d))[::-1]) @ v.T + 0.3 * rng.normal(size=(d, d))
        for _ in range(n)
    ]
    tensors = [torch.from_numpy(j) for j in jacobians]
    factors, values = [], []
    for jacobian in tensors:
        left, s, right_h = torch.linalg.svd(jacobian)
        factors.append((left, s, right_h.T))
        values.append(s)
    ks = (3, 8)
    matrices = miscoupling_matrices(tensors, values, factors, ks, METRICS)
    assert set(matrices) == {(metric, k) for metric in METRICS for k in ks}
    for (metric, k), matrix in matrices.items():
        expected = [[reference_metric(metric, a, b, k) for b in jacobians] for a in jacobians]
        np.testing.assert_allclose(matrix.numpy(), expected, rtol=1e-10, atol=1e-12)
    # The orientations and the normalisers differ from each other and from the paper's.
    distinct = {round(float(matrices[metric, 8][0, 1]), 6) for metric in METRICS}
    assert len(distinct) == len(METRICS)


def test_the_released_metrics_need_the_jacobians_own_values_and_known_names():
    jacobian = torch.eye(4, dtype=torch.float64)
    factors = [(jacobian, torch.ones(4, dtype=torch.float64), jacobian)]
    with pytest.raises(LayerlawsError, match="own singular values"):
        miscoupling_matrices([jacobian], None, factors, [2], ["paper", "released_norm"])
    with pytest.raises(LayerlawsError, match=r"coupling\.metrics: unknown .*some of paper"):
        miscoupling_matrices([jacobian], None, factors, [2], ["trace"])


def released_jacobians(model, ids: torch.Tensor, token: int) -> list[np.ndarray]:
    """J^l − I at ``token`` for every block l, as the released code takes them: the rows of
    ∂ hidden_states[l][token] / ∂ hidden_states[l − 1][token] by autograd (the model's
    weights need no gradient: the embeddings are given as a leaf that does)."""
    embeddings = model.get_input_embeddings()(ids).detach().requires_grad_(True)
    with torch.enable_grad():
        states = model(inputs_embeds=embeddings, output_hidden_states=True).hidden_states
    width = states[0].shape[-1]
    jacobians = []
    for layer in range(1, len(states)):
        rows = [
            torch.autograd.grad(states[layer][0, token, i], states[layer - 1], retain_graph=True)[
                0
            ][0, token]
            for i in range(width)
        ]
        jacobians.append((torch.stack(rows) - torch.eye(width)).double().numpy())
    return jacobians


def absolute_bound(metric: str, jacobian: np.ndarray) -> float:
    """Float32 rounding allowed near 0: 2e-6, in the units of J (‖J‖_F) for the
    unnormalised m."""
    return 2e-6 * (float(np.linalg.norm(jacobian)) if metric == "unnormalised" else 1.0)


def test_a_tiny_models_coupling_run_matches_the_released_formula(llama_folder):
    """Depth rows (last token, all layer pairs) and token rows (self-Jacobians, layer 2
    coupled with the singular vectors of layer 3) of ``measure_prompt`` for every metric,
    against the NumPy references on Jacobians taken from ``hidden_states``."""
    model = load_model(llama_folder, "float32", "cpu", attention="eager")
    ids = torch.tensor([[1, 5, 9, 14, 3, 7, 22]])
    length = ids.shape[1]
    settings = CouplingSettings(ks=(2, 4), metrics=METRICS, lss_window=3)
    measured = measure_prompt(
        model, ids, token_coupling=TokenCoupling(((2, 3),)), settings=settings
    )
    depth = {
        (row["metric"], row["k"], row["layer_a"], row["layer_b"]): row["miscoupling"]
        for row in measured.depth
    }
    last = released_jacobians(model, ids, length - 1)
    assert len(depth) == len(METRICS) * 2 * len(last) ** 2
    for (metric, k, layer_a, layer_b), value in depth.items():
        expected = reference_metric(metric, last[layer_a - 1], last[layer_b - 1], k)
        bound = absolute_bound(metric, last[layer_a - 1])
        assert value == pytest.approx(expected, rel=1e-4, abs=bound), (metric, k, layer_a, layer_b)
    tokens = {
        (row["metric"], row["k"], row["token_a"], row["token_b"]): row["miscoupling"]
        for row in measured.tokens
        if row["kind"] == "self"
    }
    at = {token: released_jacobians(model, ids, token) for token in (1, 4, length - 1)}
    for metric in METRICS:
        for token_a, token_b in ((1, 4), (4, length - 1), (length - 1, 1)):
            expected = reference_metric(metric, at[token_a][1], at[token_b][2], 4)
            assert tokens[metric, 4, token_a, token_b] == pytest.approx(
                expected, rel=1e-4, abs=absolute_bound(metric, at[token_a][1])
            ), (metric, token_a, token_b)
