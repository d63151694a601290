"""Jacobians, coupling, trajectories: against torch.autograd and constructed cases."""

import math

import numpy as np
import pytest
import torch

from layerlaws.architectures import norm_module
from layerlaws.blocks import trace_blocks
from layerlaws.coupling import miscoupling, miscoupling_matrix
from layerlaws.jacobians import jacobian_rows, top_singular
from layerlaws.models import load_model
from layerlaws.trajectories import (
    expodistance,
    line_shape_score,
    pca_projection,
    windowed_line_shape,
)


@pytest.fixture(params=["llama", "gpt2"])
def traced(request, llama_folder, gpt2_folder):
    folder = llama_folder if request.param == "llama" else gpt2_folder
    model = load_model(folder, "float32", "cpu", attention="eager")
    ids = (
        torch.tensor([[1, 5, 9, 14, 3, 7, 22]])
        if request.param == "llama"
        else torch.tensor([[5, 9, 14, 3, 7, 22]])
    )
    calls, streams = trace_blocks(model, ids)
    return model, ids, calls, streams


def test_batched_jacobian_equals_autograd(traced):
    _, _, calls, streams = traced
    layer = 1
    branch, stream = calls[layer].branch, streams[layer]
    length = stream.shape[0]
    reference = torch.autograd.functional.jacobian(lambda x: branch(x[None])[0], stream)
    for output in (length - 1, 2):
        rows = jacobian_rows(branch, stream, output, range(length), vjp_chunk=7)
        for t1 in range(length):
            np.testing.assert_allclose(
                rows[t1].numpy(), reference[output, :, t1, :].numpy(), atol=1e-5
            )
        # Causality: an output never depends on later inputs.
        if output < length - 1:
            assert rows[output + 1 :].abs().max().item() == 0


def test_trace_gives_the_raw_residual_stream(traced):
    model, ids, calls, streams = traced
    with torch.no_grad():
        states = model(ids, output_hidden_states=True).hidden_states
    assert len(calls) == 4 and streams.shape[0] == 5
    for layer in range(4):  # hidden_states[L] is after the final norm, streams[L] before it
        np.testing.assert_allclose(streams[layer].numpy(), states[layer][0].numpy(), atol=1e-5)
    np.testing.assert_allclose(
        norm_module(model)(streams[4]).detach().numpy(), states[4][0].numpy(), atol=1e-5
    )
    branch_output = calls[0].branch(streams[0][None])[0]
    np.testing.assert_allclose(
        (streams[0] + branch_output).detach().numpy(), streams[1].numpy(), atol=1e-5
    )


def test_shared_singular_vectors_are_coupled():
    rng = torch.Generator().manual_seed(0)
    u = torch.linalg.qr(torch.randn(40, 40, generator=rng))[0]
    v = torch.linalg.qr(torch.randn(40, 40, generator=rng))[0]
    first = u @ torch.diag(torch.linspace(5, 1, 40)) @ v.T
    second = u @ torch.diag(torch.linspace(3, 0.1, 40)) @ v.T
    factors = [top_singular(j, 10) for j in (first, second)]
    matrix = miscoupling_matrix([first, second], factors, 10)
    assert matrix.abs().max().item() < 1e-5


def test_independent_jacobians_give_sqrt_one_minus_one_over_k():
    """A = U′ᵀ J V′ with J Gaussian and (U′, V′) independent is a K × K Gaussian matrix, whose
    off-diagonal holds a fraction 1 − 1/K of the squared mass: E[m̃²] ≈ 1 − 1/K."""
    rng = torch.Generator().manual_seed(1)
    k, squares = 10, []
    for _ in range(60):
        jacobian = torch.randn(64, 64, generator=rng, dtype=torch.float64)
        u, _, v = top_singular(torch.randn(64, 64, generator=rng, dtype=torch.float64), k)
        squares.append(miscoupling(u.T @ jacobian @ v) ** 2)
    assert np.mean(squares) == pytest.approx(1 - 1 / k, abs=0.03)
    assert math.sqrt(np.mean(squares)) == pytest.approx(math.sqrt(0.9), abs=0.02)


def test_randomized_svd_recovers_the_top_singular_values():
    rng = torch.Generator().manual_seed(2)
    left = torch.linalg.qr(torch.randn(80, 80, generator=rng))[0]
    right = torch.linalg.qr(torch.randn(80, 80, generator=rng))[0]
    matrix = left @ torch.diag(0.7 ** torch.arange(80.0)) @ right.T
    _, full, _ = top_singular(matrix, 8)
    _, fast, _ = top_singular(matrix, 8, "randomized")
    np.testing.assert_allclose(fast.numpy(), full.numpy(), rtol=1e-4)


def test_line_shape_and_expodistance():
    direction = np.random.default_rng(0).normal(size=16)
    straight = np.outer(np.cumsum([0, 1, 3, 0.5, 2]), direction)
    assert line_shape_score(straight) == pytest.approx(1.0)
    bent = np.array([[0, 0], [1, 0], [1, 1], [2, 1]], dtype=float)
    assert line_shape_score(bent) == pytest.approx(3 / math.sqrt(5))
    assert line_shape_score(bent) > 1
    np.testing.assert_allclose(windowed_line_shape(bent, 1), [1, 1, 1])


def test_line_shape_windows_are_centred_and_cut_at_the_ends():
    rng = np.random.default_rng(5)
    trajectory = rng.normal(size=(13, 6))  # 12 blocks
    windows = windowed_line_shape(trajectory, 11)
    assert windows.shape == (12,)
    # Block 6 sees blocks 1…11, block 1 sees 1…6, block 12 sees 7…12.
    assert windows[5] == pytest.approx(line_shape_score(trajectory[0:12]))
    assert windows[0] == pytest.approx(line_shape_score(trajectory[0:7]))
    assert windows[11] == pytest.approx(line_shape_score(trajectory[6:13]))
    assert windowed_line_shape(trajectory, 3)[4] == pytest.approx(line_shape_score(trajectory[3:7]))
    rng = np.random.default_rng(1)
    units = rng.normal(size=(8, 16))
    units /= np.linalg.norm(units, axis=1, keepdims=True)
    geometric = units * (1.3 ** np.arange(8))[:, None]
    assert expodistance(geometric) == pytest.approx(0.0, abs=1e-20)
    uneven = units * np.array([1, 2, 2.5, 10, 11, 30, 31, 100])[:, None]
    assert expodistance(uneven) > 0.1
    assert pca_projection(rng.normal(size=(3, 8, 16))).shape == (3, 8, 2)


def test_pca_is_fitted_on_the_last_layer():
    """The last layer varies along e1, the earlier layers far more along e2: the first
    component is e1 (fitted on X^L), not e2 (which a fit on all points would pick)."""
    rng = np.random.default_rng(4)
    tokens, layers, width = 6, 5, 10
    trajectories = np.zeros((tokens, layers, width))
    trajectories[:, :-1, 1] = rng.normal(scale=100.0, size=(tokens, layers - 1))
    spread = rng.normal(size=tokens)
    trajectories[:, -1, 0] = spread
    trajectories[:, -1, 2] = 0.1 * rng.normal(size=tokens)
    projected = pca_projection(trajectories)
    last = trajectories[:, -1, :]
    centred = last - last.mean(axis=0)
    reference = np.linalg.svd(centred, full_matrices=False)[2][:2]
    expected = (trajectories - last.mean(axis=0)) @ reference.T
    np.testing.assert_allclose(np.abs(projected), np.abs(expected), atol=1e-9)
    np.testing.assert_allclose(
        np.abs(projected[:, -1, 0]), np.abs(spread - spread.mean()), atol=0.05
    )
    # The earlier layers' large spread along e2 does not show on the first component.
    assert np.ptp(projected[:, :-1, 0]) < 1e-9
