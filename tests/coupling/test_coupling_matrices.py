"""Aubry et al.'s unnormalised mis-coupling m (Eq. 13), the kept coupling matrices A and
the logit lens of the trajectory pass, against references written here with numpy and
scipy in float64; and the coupling stage run by Snakemake on a tiny model, its tables
checked against its own ``couplings.npz``."""

from __future__ import annotations

import numpy as np
import polars as pl
import pytest
import scipy.special
import scipy.stats
import torch
from coupling_runs import measure_prompts

from layerlaws.coupling.jacobians import jacobian_rows
from layerlaws.coupling.measurement import TokenCoupling, measure_prompt
from layerlaws.coupling.miscoupling import miscoupling_matrices
from layerlaws.coupling.plots import depth_grid_blocks, pair_coupling
from layerlaws.coupling.settings import CouplingSettings
from layerlaws.models.blocks import trace_blocks
from layerlaws.models.loading import load_model

IDS = torch.tensor([[1, 5, 9, 14, 3, 7, 22]])


def off_diagonal_norm(a: np.ndarray) -> float:
    """Eq. 13: m(A) = ‖A − Diag(A)‖_F."""
    return float(np.linalg.norm(a - np.diag(np.diag(a)), "fro"))


def coupling_reference(jacobian: np.ndarray, other: np.ndarray, k: int) -> np.ndarray:
    """A = U′_kᵀ J V′_k with U′, V′ the top-k singular vectors of ``other``."""
    u, _, vh = np.linalg.svd(other.astype(np.float64))
    return u[:, :k].T @ jacobian.astype(np.float64) @ vh[:k].T


@pytest.fixture(scope="module")
def llama(llama_folder):
    return load_model(llama_folder, "float64", "cpu", attention="eager")


def test_unnormalised_miscoupling_is_eq_13_on_random_matrices():
    """With factors whose U′ = V′ = I, A is the top-left K × K block of J itself."""
    rng = np.random.default_rng(0)
    jacobians = [rng.normal(size=(6, 6)) for _ in range(3)]
    eye = torch.eye(6, dtype=torch.float64)
    factors = [(eye, torch.ones(6, dtype=torch.float64), eye)]
    matrices = miscoupling_matrices(
        [torch.from_numpy(j) for j in jacobians], None, factors, [2, 5], ["unnormalised"]
    )
    for k in (2, 5):
        expected = [off_diagonal_norm(j[:k, :k]) for j in jacobians]
        np.testing.assert_allclose(matrices["unnormalised", k][:, 0].numpy(), expected, rtol=1e-12)


def test_depth_and_token_rows_and_kept_matrices_follow_eqs_13_and_14(llama):
    """On the tiny Llama's real Jacobians: the kept A (smallest K) is U′ᵀ J V′ up to the
    signs of the singular vectors (so |A| is compared), and the depth and token rows of
    ``paper`` and ``unnormalised`` are Eqs. 14 and 13 of it."""
    settings = CouplingSettings(ks=(3, 5), metrics=("paper", "unnormalised"), lss_window=3)
    coupling = TokenCoupling(((2, 3),))
    measured = measure_prompt(llama, IDS, token_coupling=coupling, settings=settings)
    calls, streams = trace_blocks(llama, IDS)
    last = IDS.shape[1] - 1
    depth = [
        jacobian_rows(call.branch, stream, last, [last])[0].numpy()
        for call, stream in zip(calls, streams, strict=False)
    ]
    rows = {
        (r["layer_a"], r["layer_b"], r["k"], r["metric"]): r["miscoupling"] for r in measured.depth
    }
    assert measured.depth_couplings.shape == (4, 4, 3, 3)
    for a in range(4):
        for b in range(4):
            for k in (3, 5):
                reference = coupling_reference(depth[a], depth[b], k)
                m = off_diagonal_norm(reference)
                scale = np.linalg.norm(reference)
                assert rows[a + 1, b + 1, k, "unnormalised"] == pytest.approx(
                    m, rel=1e-6, abs=1e-7 * scale
                )
                assert rows[a + 1, b + 1, k, "paper"] == pytest.approx(m / scale, abs=1e-7)
            np.testing.assert_allclose(
                np.abs(measured.depth_couplings[a, b]),
                np.abs(coupling_reference(depth[a], depth[b], 3)),
                rtol=1e-4,
                atol=1e-6,
            )

    def self_jacobian(layer, token):
        return jacobian_rows(calls[layer - 1].branch, streams[layer - 1], token, [token])[0]

    length = IDS.shape[1]
    assert measured.token_couplings.shape == (length, length, 3, 3)
    tokens = {
        (r["token_a"], r["token_b"]): r["miscoupling"]
        for r in measured.tokens
        if r["kind"] == "self" and r["k"] == 3 and r["metric"] == "unnormalised"
    }
    for t, t_prime in ((0, 4), (5, 2), (6, 6)):
        reference = coupling_reference(
            self_jacobian(2, t).numpy(), self_jacobian(3, t_prime).numpy(), 3
        )
        np.testing.assert_allclose(
            np.abs(measured.token_couplings[t, t_prime]), np.abs(reference), rtol=1e-4, atol=1e-6
        )
        assert tokens[t, t_prime] == pytest.approx(off_diagonal_norm(reference), rel=1e-6)


@pytest.mark.parametrize("final_norm", ["in_last_block", "excluded"])
def test_logit_lens_columns_end_at_the_models_own_prediction(llama, final_norm):
    """At layer L the lens is the model's own output, whether or not x^L has passed the
    final norm; entropy and next-token loss of softmax(model(ids).logits) by scipy."""
    settings = CouplingSettings(ks=(2,), final_norm=final_norm, lss_window=3)
    measured = measure_prompt(
        llama, IDS, token_coupling=TokenCoupling(((1, 1),)), settings=settings
    )
    layers = pl.DataFrame(measured.layers)
    last = layers.filter(pl.col("layer") == 4).sort("token")
    with torch.no_grad():
        logits = llama(input_ids=IDS).logits[0].double().numpy()
    probabilities = scipy.special.softmax(logits, axis=-1)
    ids = IDS[0].numpy()
    np.testing.assert_allclose(
        last["logit_entropy"].to_numpy(), scipy.stats.entropy(probabilities, axis=-1), atol=1e-6
    )
    expected_loss = -np.log(probabilities[np.arange(len(ids) - 1), ids[1:]])
    np.testing.assert_allclose(last["next_token_loss"].to_numpy()[:-1], expected_loss, atol=1e-6)
    assert layers.filter(pl.col("token") == len(ids) - 1)["next_token_loss"].is_nan().all()
    assert layers.filter(pl.col("layer") < 4)["logit_entropy"].is_finite().all()


def test_the_prompt_set_keeps_the_mean_absolute_coupling(llama_folder):
    settings = CouplingSettings(ks=(2, 3), lss_window=3)
    prompts = [[1, 5, 9, 14], [1, 22, 8, 30, 11]]
    _, result = measure_prompts(
        llama_folder, prompts, settings, token_coupling=TokenCoupling(((1, 2),))
    )
    couplings = result.couplings
    assert int(couplings["k"]) == 2 and list(couplings["token_layers"]) == [1, 2]
    for weights in ("trained", "random"):
        first, second = couplings[f"depth/{weights}/0"], couplings[f"depth/{weights}/1"]
        assert first.dtype == np.float32 and first.shape == (4, 4, 2, 2)
        np.testing.assert_allclose(
            couplings[f"depth/{weights}/mean_abs"], (np.abs(first) + np.abs(second)) / 2, rtol=1e-6
        )
        assert couplings[f"tokens/{weights}/0"].shape == (4, 4, 2, 2)
    assert set(result.depth["metric"]) == {"paper", "unnormalised"}


def test_pair_coupling_is_one_minus_the_mean_miscoupling_scaled_per_model():
    rng = np.random.default_rng(3)
    values = rng.uniform(0.2, 0.9, size=(2, 3, 3))
    rows = [
        {
            "weights": w,
            "prompt": "mean",
            "layer_a": a + 1,
            "layer_b": b + 1,
            "k": k,
            "metric": "paper",
            "miscoupling": values[i, a, b] + (k - 2),
        }
        for i, w in enumerate(("trained", "random"))
        for a in range(3)
        for b in range(3)
        for k in (2, 4)
    ]
    pairs = pair_coupling(pl.DataFrame(rows))
    for i, weights in enumerate(("trained", "random")):
        coupling = {
            (a, b): 1 - (values[i, a, b] + values[i, b, a]) / 2 for a, b in ((0, 1), (0, 2), (1, 2))
        }
        low, high = min(coupling.values()), max(coupling.values())
        block = pairs.filter(pl.col("weights") == weights)
        for row in block.iter_rows(named=True):
            expected = coupling[row["low"] - 1, row["high"] - 1]
            assert row["coupling"] == pytest.approx(expected)
            assert row["weight"] == pytest.approx((expected - low) / (high - low))


def test_the_coupling_stage_runs_and_its_tables_agree_with_its_matrices(base_config, tmp_path):
    """Snakemake runs the coupling stage alone on the tiny Llama (the schema's default
    metrics): depth.csv's ``paper`` and ``unnormalised`` rows at the smallest K are Eqs. 14
    and 13 of the matrices in couplings.npz, layers.csv has the logit lens, and every
    figure is drawn."""
    from snakemake_runs import run_ok, write_config

    config = {
        **base_config,
        "runs": [],
        "signatures": {"runs": []},
        "hidden_states": {"keep": False},
    }
    write_config(tmp_path, config)
    run_ok(tmp_path)
    folder = tmp_path / "results/coupling/tiny-llama/few"
    depth = pl.read_csv(folder / "depth.csv", schema_overrides={"prompt": pl.String})
    assert set(depth["metric"]) == {"paper", "unnormalised"}
    with np.load(folder / "couplings.npz") as archive:
        couplings = dict(archive)
    assert int(couplings["k"]) == 2
    for weights in ("trained", "random"):
        matrices = couplings[f"depth/{weights}/0"].astype(np.float64)
        rows = depth.filter(
            (pl.col("weights") == weights) & (pl.col("prompt") == "0") & (pl.col("k") == 2)
        )
        for row in rows.iter_rows(named=True):
            a = matrices[row["layer_a"] - 1, row["layer_b"] - 1]
            m = off_diagonal_norm(a)
            scale = np.linalg.norm(a) if row["metric"] == "unnormalised" else 1.0
            expected = m if row["metric"] == "unnormalised" else m / np.linalg.norm(a)
            # A is kept in float32: differences of its rounding, relative to ‖A‖.
            assert row["miscoupling"] == pytest.approx(expected, rel=1e-4, abs=1e-5 * scale)
    layers = pl.read_csv(folder / "trajectories/layers.csv")
    assert layers.columns[-2:] == ["logit_entropy", "next_token_loss"]
    assert (layers["logit_entropy"] > 0).all() and layers["logit_entropy"].is_finite().all()
    for name in ("depth_grid", "token_grid", "adjacency_graph", "depth", "adjacency"):
        assert (folder / f"{name}.svg").stat().st_size > 1000
    assert (folder / "trajectories/layers.svg").stat().st_size > 1000


def test_the_depth_grid_shows_blocks_9_to_16_as_fig_3():
    """Aubry et al.'s Fig. 3 draws blocks 9–16; a shallower model its last eight or all."""
    assert list(depth_grid_blocks(30)) == list(range(9, 17))
    assert list(depth_grid_blocks(16)) == list(range(9, 17))
    assert list(depth_grid_blocks(12)) == list(range(5, 13))
    assert list(depth_grid_blocks(4)) == [1, 2, 3, 4]
