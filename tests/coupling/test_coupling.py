"""Jacobians, coupling, trajectories: against torch.autograd and constructed cases."""

import math

import numpy as np
import polars as pl
import pytest
import scipy.stats
import torch

from layerlaws.core.errors import LayerlawsError
from layerlaws.core.geometry import principal_plane
from layerlaws.coupling.jacobians import jacobian_rows, top_singular
from layerlaws.coupling.measurement import TokenCoupling, layer_pairs, measure_prompt
from layerlaws.coupling.miscoupling import miscoupling, miscoupling_matrices
from layerlaws.coupling.plots import (
    first_coupled_prompt,
    plot_depth_grid,
    plot_token_grid,
    plot_tokens,
)
from layerlaws.coupling.settings import CouplingSettings
from layerlaws.coupling.trajectories import (
    equidistance_cv,
    expodistance,
    line_shape_score,
    windowed_line_shape,
)
from layerlaws.models.architectures import norm_module
from layerlaws.models.blocks import trace_blocks
from layerlaws.models.loading import load_model


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


def test_trace_gives_the_residual_stream_with_the_final_norm_in_the_last_block(traced):
    model, ids, calls, streams = traced
    with torch.no_grad():
        states = model(ids, output_hidden_states=True).hidden_states
    assert len(calls) == 4 and streams.shape[0] == 5
    for layer in range(5):  # hidden_states[L] is after the final norm, as streams[L] now is
        np.testing.assert_allclose(streams[layer].numpy(), states[layer][0].numpy(), atol=1e-5)
    branch_output = calls[0].branch(streams[0][None])[0]
    np.testing.assert_allclose(
        (streams[0] + branch_output).detach().numpy(), streams[1].numpy(), atol=1e-5
    )
    _, raw_streams = trace_blocks(model, ids, final_norm=False)
    np.testing.assert_allclose(raw_streams[:4].numpy(), streams[:4].numpy())
    np.testing.assert_allclose(
        norm_module(model)(raw_streams[4]).detach().numpy(), streams[4].numpy(), atol=1e-5
    )


def test_last_jacobian_includes_the_final_norm(traced):
    """Aubry et al., Eq. 7: J^L is the Jacobian of LN(x + f(x)) − x, checked against
    torch.autograd.functional.jacobian of that function built from the bare block."""
    model, _, calls, streams = traced
    stream = streams[3]
    length = stream.shape[0]
    bare = calls[3].block
    raw = type(calls[3])(bare, calls[3].args, calls[3].kwargs)
    norm = norm_module(model)

    def reference_branch(x):
        return norm(x + raw.branch(x[None])[0]) - x

    reference = torch.autograd.functional.jacobian(reference_branch, stream)
    rows = jacobian_rows(calls[3].branch, stream, length - 1, range(length), vjp_chunk=5)
    for t1 in range(length):
        np.testing.assert_allclose(
            rows[t1].numpy(), reference[length - 1, :, t1, :].numpy(), atol=1e-5
        )
    without_norm = jacobian_rows(raw.branch, stream, length - 1, [length - 1])[0]
    assert (without_norm - rows[-1]).abs().max().item() > 1e-2


def test_shared_singular_vectors_are_coupled():
    rng = torch.Generator().manual_seed(0)
    u = torch.linalg.qr(torch.randn(40, 40, generator=rng))[0]
    v = torch.linalg.qr(torch.randn(40, 40, generator=rng))[0]
    first = u @ torch.diag(torch.linspace(5, 1, 40)) @ v.T
    second = u @ torch.diag(torch.linspace(3, 0.1, 40)) @ v.T
    factors = [top_singular(j, 10) for j in (first, second)]
    matrix = miscoupling_matrices([first, second], None, factors, [10])["paper", 10]
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


def test_randomized_svd_is_seeded_and_leaves_the_global_random_state_alone():
    """A Gaussian matrix has a flat spectrum, so the randomised SVD's answer depends on its
    random projection: the same ``seed`` gives the same triplets whatever the global state,
    another seed other ones, and the global generator is left as it was (the test restores
    the global state it changes)."""
    matrix = torch.randn(60, 60, generator=torch.Generator().manual_seed(3))
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(1)
        first = top_singular(matrix, 5, "randomized", seed=7)
        torch.manual_seed(2)
        state = torch.get_rng_state()
        second = top_singular(matrix, 5, "randomized", seed=7)
        for ours, again in zip(first, second, strict=True):
            assert torch.equal(ours, again)
        assert torch.equal(torch.get_rng_state(), state)
        other = top_singular(matrix, 5, "randomized", seed=8)
        assert not torch.allclose(other[1], first[1], rtol=1e-3)


def test_line_shape_and_expodistance():
    direction = np.random.default_rng(0).normal(size=16)
    straight = np.outer(np.cumsum([0, 1, 3, 0.5, 2]), direction)
    assert line_shape_score(straight) == pytest.approx(1.0)
    bent = np.array([[0, 0], [1, 0], [1, 1], [2, 1]], dtype=float)
    assert line_shape_score(bent) == pytest.approx(3 / math.sqrt(5))
    assert line_shape_score(bent) > 1
    np.testing.assert_allclose(windowed_line_shape(bent, 1), [1, 1, 1])


def reference_line_shape(points: np.ndarray) -> float:
    """Aubry et al.'s line-shape score of ``points`` (n, d): the n − 1 steps made unit
    vectors and added up, n − 1 over the length of their sum."""
    steps = np.diff(points, axis=0)
    units = steps / np.linalg.norm(steps, axis=1, keepdims=True)
    return float(len(steps) / np.linalg.norm(units.sum(axis=0)))


def test_line_shape_windows_are_centred_and_cut_at_the_ends():
    rng = np.random.default_rng(5)
    trajectory = rng.normal(size=(13, 6))  # 12 blocks
    windows = windowed_line_shape(trajectory, 11)
    assert windows.shape == (12,)
    # Block 6 sees blocks 1…11, block 1 sees 1…6, block 12 sees 7…12.
    assert windows[5] == pytest.approx(reference_line_shape(trajectory[0:12]))
    assert windows[0] == pytest.approx(reference_line_shape(trajectory[0:7]))
    assert windows[11] == pytest.approx(reference_line_shape(trajectory[6:13]))
    three = windowed_line_shape(trajectory, 3)
    assert three[4] == pytest.approx(reference_line_shape(trajectory[3:7]))
    rng = np.random.default_rng(1)
    units = rng.normal(size=(8, 16))
    units /= np.linalg.norm(units, axis=1, keepdims=True)
    geometric = units * (1.3 ** np.arange(8))[:, None]
    assert expodistance(geometric) == pytest.approx(0.0, abs=1e-20)
    uneven = units * np.array([1, 2, 2.5, 10, 11, 30, 31, 100])[:, None]
    assert expodistance(uneven) > 0.1
    trajectories = rng.normal(size=(3, 8, 16))
    assert principal_plane(trajectories, trajectories[:, -1]).shape == (3, 8, 2)


def test_equidistance_cv_is_zero_for_equal_steps_and_matches_scipy():
    rng = np.random.default_rng(2)
    directions = rng.normal(size=(6, 12))
    directions /= np.linalg.norm(directions, axis=1, keepdims=True)
    equal = np.vstack([np.zeros(12), np.cumsum(2.5 * directions, axis=0)])
    assert equidistance_cv(equal) == pytest.approx(0.0, abs=1e-12)
    lengths = np.array([1, 2, 4, 8, 16, 32.0])
    growing = np.vstack([np.zeros(12), np.cumsum(lengths[:, None] * directions, axis=0)])
    assert equidistance_cv(growing) == pytest.approx(scipy.stats.variation(lengths))


def test_token_coupling_between_two_layers_with_fixed_tokens(traced):
    """Token rows equal m̃ of Jacobians at layer l coupled with the singular vectors of
    those at layer l′ (Eq. 14 in torch), the Jacobians taken by
    torch.autograd.functional.jacobian of each traced block's branch; the fixed input
    token t1 keeps outputs t ≥ t1 only, the fixed output token t2 inputs t ≤ t2."""
    model, ids, calls, streams = traced
    length = ids.shape[1]
    coupling = TokenCoupling(((2, 4),), fixed_input_token=2, fixed_output_token=-2)
    settings = CouplingSettings(ks=(3,), lss_window=3)
    measured = measure_prompt(model, ids, token_coupling=coupling, settings=settings, vjp_chunk=16)
    rows = {
        (row["kind"], row["token_a"], row["token_b"]): row["miscoupling"]
        for row in measured.tokens
        if row["metric"] == "paper"
    }
    assert {key[1] for key in rows if key[0] == "fixed_input"} == set(range(2, length))
    assert {key[1] for key in rows if key[0] == "fixed_output"} == set(range(length - 1))

    whole = {
        layer: torch.autograd.functional.jacobian(
            lambda x, branch=calls[layer - 1].branch: branch(x[None])[0], streams[layer - 1]
        )
        for layer in (2, 4)
    }  # (T, d, T, d) each

    def jacobian(layer, output, token):
        return whole[layer][output, :, token, :]

    def reference_miscoupling(coupling):
        return float(
            torch.linalg.norm(coupling - torch.diag(coupling.diagonal()))
            / torch.linalg.norm(coupling)
        )

    cases = {
        "self": lambda layer, t: jacobian(layer, t, t),
        "fixed_input": lambda layer, t: jacobian(layer, t, 2),
        "fixed_output": lambda layer, t: jacobian(layer, length - 2, t),
    }
    for kind, of in cases.items():
        for token_a, token_b in ((2, 3), (3, 2), (length - 2, 2)):
            u, _, v = torch.linalg.svd(of(4, token_b))
            expected = reference_miscoupling(u[:, :3].T @ of(2, token_a) @ v[:3].T)
            assert rows[(kind, token_a, token_b)] == pytest.approx(expected, rel=1e-4)
    assert len(measured.layers) == length * 5
    with pytest.raises(LayerlawsError, match="fixed_output_token is 40"):
        measure_prompt(
            model,
            ids,
            token_coupling=TokenCoupling(((1, 1),), fixed_output_token=40),
            settings=CouplingSettings(ks=(2,)),
        )
    assert layer_pairs([3, [1, 4]], 4) == [(3, 3), (1, 4)]
    assert layer_pairs([], 4) == [(2, 2)]
    with pytest.raises(LayerlawsError, match="beyond the model's 4"):
        layer_pairs([[1, 5]], 4)


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
    projected = principal_plane(trajectories, fitted_on=trajectories[:, -1])
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


def test_a_bfloat16_branch_gives_float32_jacobians_that_an_svd_accepts():
    """Half-precision models are measured: their Jacobians are widened to float32 before
    the SVD (torch has no bfloat16 SVD), and equal the float32 branch's within bf16
    rounding."""
    generator = torch.Generator().manual_seed(0)
    weight = torch.randn(6, 6, generator=generator, dtype=torch.float64) / 3
    stream = torch.randn(4, 6, generator=generator, dtype=torch.float64)

    def branch(dtype):
        return lambda x: torch.tanh(x @ weight.to(dtype).T)

    half = jacobian_rows(branch(torch.bfloat16), stream.bfloat16(), 3, [3])[0]
    full = jacobian_rows(branch(torch.float64), stream, 3, [3])[0]
    assert half.dtype == torch.float32
    assert torch.allclose(half.double(), full, atol=3e-2)
    u, s, v = top_singular(half, 2)
    assert u.shape == v.shape == (6, 2) and torch.isfinite(s).all()


def test_jacobians_on_a_subset_of_prompts_and_trajectories_on_every_one(llama_folder, tmp_path):
    """The Jacobians of prompt 1 alone of three (a subset that leaves out the first, as
    ``jacobian_draw: per_dataset`` may): its tables and arrays are those of a run over
    every prompt, nothing of the others; the trajectories of all three are those of that
    run; the figures of one prompt draw prompt 1."""
    from coupling_runs import measure_prompts

    prompts = [[1, 5, 9, 14, 3], [1, 7, 22, 4], [1, 8, 3, 11, 6, 2]]
    settings = CouplingSettings(ks=(2, 3))
    _, every = measure_prompts(llama_folder, prompts, settings, "float64")
    _, subset = measure_prompts(llama_folder, prompts, settings, "float64", jacobian_indices=[1])
    for table in ("depth", "singular_values", "tokens"):
        expected = getattr(every, table).filter(pl.col("prompt").is_in(["1", "mean"]))
        found = getattr(subset, table)
        assert found.height == expected.height > 0, table
        if table == "depth":  # the mean over the measured prompt is that prompt
            mean = found.filter(pl.col("prompt") == "mean")["miscoupling"].to_numpy()
            single = found.filter(pl.col("prompt") == "1")["miscoupling"].to_numpy()
            np.testing.assert_array_equal(mean, single)
            found, expected = (frame.filter(pl.col("prompt") == "1") for frame in (found, expected))
        assert found.equals(expected), table
    assert sorted(subset.factors) == [
        f"{w}/1/{key}" for w in ("random", "trained") for key in "suv"
    ]
    assert {key for key in subset.couplings if key.startswith(("depth/", "tokens/"))} == {
        f"{kind}/{w}/{name}"
        for w in ("trained", "random")
        for kind, name in (("depth", "1"), ("depth", "mean_abs"), ("tokens", "1"))
    }
    for key in ("depth/trained/1", "depth/random/1"):
        np.testing.assert_array_equal(subset.couplings[key], every.couplings[key])
    assert subset.couplings["tokens/trained/1"].shape == (4, 4, 2, 2)  # T × T × K × K
    for table in ("trajectories", "layers"):
        assert getattr(subset, table).equals(getattr(every, table)), table
    assert sorted(subset.streams) == sorted(every.streams)
    assert (
        first_coupled_prompt(subset.couplings) == 1 and first_coupled_prompt(every.couplings) == 0
    )
    options = {"format": "svg", "dpi": 50, "width": 8.0}
    for draw, name in ((plot_depth_grid, "depth_grid"), (plot_token_grid, "token_grid")):
        draw(subset.couplings, path=tmp_path / f"{name}.svg", title="t", options=options)
        assert (tmp_path / f"{name}.svg").stat().st_size > 1000
    plot_tokens(subset.tokens, path=tmp_path / "tokens.svg", title="t", options=options)
    assert (tmp_path / "tokens.svg").stat().st_size > 1000


def test_trajectory_scores_of_an_uneven_trajectory_follow_the_definitions():
    """Expodistance, equidistance CV and the windowed LSS of a random (neither straight,
    nor geometric, nor equally spaced) trajectory against the definitions written out
    here: ED = Var_l(α^l) / (Mean_l α^l)², α^l = ln(‖x^l‖ / ‖x^{l−1}‖) (population
    variance); CV = Std_l / Mean_l of the step lengths; LSS of the window of blocks
    l − 1…l + 1 (width 3), cut at the ends, as the number of unit steps over the length of
    their sum."""
    rng = np.random.default_rng(7)
    trajectory = np.cumsum(rng.normal(size=(9, 5)) + 0.4, axis=0) + 1.0
    norms = [math.sqrt(sum(v * v for v in point)) for point in trajectory]
    rates = np.array([math.log(norms[i] / norms[i - 1]) for i in range(1, 9)])
    mean = rates.sum() / len(rates)
    assert expodistance(trajectory) == pytest.approx(
        ((rates - mean) ** 2).sum() / len(rates) / mean**2, rel=1e-10
    )
    steps = np.diff(trajectory, axis=0)
    lengths = np.sqrt((steps**2).sum(axis=1))
    mean_length = lengths.sum() / len(lengths)
    cv = math.sqrt(((lengths - mean_length) ** 2).sum() / len(lengths)) / mean_length
    assert equidistance_cv(trajectory) == pytest.approx(cv, rel=1e-10)
    units = steps / lengths[:, None]
    expected = []
    for block in range(1, 9):
        window = units[max(block - 1, 1) - 1 : min(block + 1, 8)]
        expected.append(len(window) / np.linalg.norm(window.sum(axis=0)))
    np.testing.assert_allclose(windowed_line_shape(trajectory, 3), expected, rtol=1e-10)
