"""The matrix-free coupling (``coupling.svd: matrix_free``): factors and coupling matrices
from Jacobian–vector products against Jacobians formed here by
``torch.autograd.functional.jacobian``, and the whole measurement against the formed
path."""

from __future__ import annotations

import numpy as np
import polars as pl
import pytest
import torch
from conftest import llama_tokenizer
from tiny_models import save_tiny_model

from layerlaws.coupling.costs import coupling_products, factor_products
from layerlaws.coupling.measurement import TokenCoupling, measure_prompt
from layerlaws.coupling.operators import (
    DenseJacobian,
    Linearisation,
    TokenJacobian,
    coupling_stack,
    randomized_factors,
)
from layerlaws.coupling.settings import CouplingSettings
from layerlaws.models.blocks import trace_blocks
from layerlaws.models.loading import load_model

IDS = torch.tensor([[1, 5, 9, 14, 3, 7, 22]])


@pytest.fixture(scope="module")
def wide(tmp_path_factory, texts):
    """A tiny Llama of width 160 in float64, traced on ``IDS``: wide enough that K = 4
    takes the Krylov sketch (140 products, a 70-column space) rather than J whole."""
    folder = save_tiny_model(
        tmp_path_factory.mktemp("wide"), "llama", llama_tokenizer(texts), hidden_size=160
    )
    model = load_model(folder, "float64", "cpu", attention="eager")
    calls, streams = trace_blocks(model, IDS)
    return calls, streams


def formed(call, stream, input_token: int, output_token: int) -> torch.Tensor:
    """J_{t1 t2} (d, d) by torch.autograd.functional.jacobian of the block's branch."""
    full = torch.autograd.functional.jacobian(lambda x: call.branch(x[None])[0], stream)
    return full[output_token, :, input_token, :]


@pytest.mark.parametrize("tokens", [(6, 6), (2, 6)])
def test_factors_match_the_svd_of_the_formed_jacobian(wide, tokens):
    """K = 4 of d = 160 with the default settings (14 columns, 4 steps: a 70-column Krylov
    space, 140 products against the 160 of forming J): the singular values within 1e-3
    (relative) and the top-4 subspaces with every principal-angle cosine above 0.995.
    The spectrum is flat (J_{6,6}: s_4/s_5 = 1.002), so the 4th direction is the hard
    one; seen: 3e-4 and 0.999 for J_{6,6}, 1e-7 and 1.0000 for J_{2,6}."""
    calls, streams = wide
    operator = TokenJacobian(Linearisation(calls[1].branch, streams[1], 5).at(tokens[1]), tokens[0])
    u, s, v = randomized_factors(operator, 4, seed=3)
    ref_u, ref_s, ref_vh = torch.linalg.svd(formed(calls[1], streams[1], *tokens))
    np.testing.assert_allclose(s.numpy(), ref_s[:4].numpy(), rtol=1e-3)
    assert torch.linalg.svdvals(ref_u[:, :4].T @ u).min() > 0.995
    assert torch.linalg.svdvals(ref_vh[:4] @ v).min() > 0.995


def test_coupling_matrices_are_exact(wide):
    """A_b = U_bᵀ J V_b (and V_bᵀ J U_b) from Jᵀ products, for factors of other Jacobians,
    against the formed J to 1e-6 (seen: 3e-7, entries of A up to ~3). Not float64
    rounding: Llama's RMSNorm casts its input to float32 and eager attention takes its
    softmax in float32, so even a float64 block runs those steps, and their backward, in
    float32. A one-hot cotangent (what forms J) is rounded the same way on both sides,
    so Jᵀ I is J exactly; a dense one (the columns of U_b) is rounded inside the block,
    to ~1e-7 relative."""
    calls, streams = wide
    jacobian = formed(calls[1], streams[1], 3, 6)
    others = [torch.linalg.svd(formed(calls[b], streams[b], t, t)) for b, t in ((0, 6), (1, 4))]
    factors = [(u[:, :5], s[:5], vh[:5].T) for u, s, vh in others]
    operator = TokenJacobian(Linearisation(calls[1].branch, streams[1], 4).at(6), 3)
    for swapped in (False, True):
        found = coupling_stack(operator, factors, 5, swapped)
        for b, (u, _, v) in enumerate(factors):
            left, right = (v, u) if swapped else (u, v)
            np.testing.assert_allclose(
                found[b].numpy(), (left.T @ jacobian @ right).numpy(), atol=1e-6
            )


def test_a_rank_deficient_jacobian(wide):
    """J of rank 6 (d = 160, K = 4): the Krylov space is exhausted after its first block,
    yet the basis stays orthonormal, so V is orthonormal and the triplets are the exact
    SVD's (to 1e-10, all in float64), against torch.linalg.svd."""
    generator = torch.Generator().manual_seed(0)
    left, right = (torch.randn(160, 6, dtype=torch.float64, generator=generator) for _ in "lr")
    jacobian = left @ right.T
    u, s, v = randomized_factors(DenseJacobian(jacobian), 4)
    ref_u, ref_s, ref_vh = torch.linalg.svd(jacobian)
    np.testing.assert_allclose(s.numpy(), ref_s[:4].numpy(), rtol=1e-10)
    np.testing.assert_allclose((v.T @ v).numpy(), np.eye(4), atol=1e-10)
    np.testing.assert_allclose(torch.linalg.svdvals(ref_u[:, :4].T @ u).numpy(), 1, atol=1e-10)
    np.testing.assert_allclose(torch.linalg.svdvals(ref_vh[:4] @ v).numpy(), 1, atol=1e-10)


class Counted(DenseJacobian):
    """A formed J that counts the vectors it is applied to (its products)."""

    products = 0

    def matvec(self, vectors: torch.Tensor) -> torch.Tensor:
        self.products += vectors.shape[1]
        return super().matvec(vectors)

    def rmatvec(self, vectors: torch.Tensor) -> torch.Tensor:
        self.products += vectors.shape[1]
        return super().rmatvec(vectors)


@pytest.mark.parametrize(("width", "k", "expected"), [(24, 4, 24), (160, 4, 140), (576, 10, 200)])
def test_the_plan_counts_the_products_made(width, k, expected):
    """The workflow's plan (``factor_products``) counts the products ``randomized_factors``
    makes: d where J whole is no dearer, else 2 (K + 10) · 5; and ``coupling_stack``
    makes n_b·K, as ``coupling_products`` says."""
    generator = torch.Generator().manual_seed(0)
    counted = Counted(torch.randn(width, width, dtype=torch.float64, generator=generator))
    factors = randomized_factors(counted, k)
    assert counted.products == factor_products(k, width) == expected
    counted.products = 0
    coupling_stack(counted, [factors] * 3, k, swapped=True)
    assert counted.products == coupling_products(3, k, swapped=False) == 3 * k


def measure(model, svd: str):
    settings = CouplingSettings(
        ks=(2, 4), metrics=("paper", "unnormalised", "released_norm_swapped"), svd=svd
    )
    return measure_prompt(
        model,
        IDS,
        token_coupling=TokenCoupling(((2, 2), (1, 3)), 1, 5),
        settings=settings,
        vjp_chunk=16,
    )


def table(rows) -> pl.DataFrame:
    frame = pl.DataFrame(rows)
    return frame.sort([c for c in frame.columns if c != "miscoupling"])


def test_measurement_matches_the_formed_path(llama_folder):
    """On the tiny Llama (d = 24) at K ≤ 4, d is below the sketch's 140 products, so the
    matrix-free factors come from Jᵀ whole by 24 VJPs: the formed path's up to rounding
    and the signs of the singular vectors (which no metric sees). The block runs in float64
    throughout (``trace_blocks`` applies ``keep_float64`` to transformers' float32 norm
    and softmax): J's entries by the two paths differ by ~d·ε64‖J‖, so the singular values
    agree to 1e-10 relative (d·ε64·σ_1/σ_K; seen 3e-15), every depth and token metric to
    1e-9 (the released metrics dividing by the smaller values; seen 4e-13) and the kept
    |A| to 1e-9 of its largest (seen 5e-16); the same tables and shapes; seeded, so
    identical twice; the global random state untouched."""
    model = load_model(llama_folder, "float64", "cpu", attention="eager")
    full = measure(model, "full")
    state = torch.get_rng_state()
    free = measure(model, "matrix_free")
    assert torch.equal(torch.get_rng_state(), state)
    for name in ("depth", "tokens"):
        expected, found = table(getattr(full, name)), table(getattr(free, name))
        assert expected.columns == found.columns and expected.shape == found.shape
        assert expected.drop("miscoupling").equals(found.drop("miscoupling"))
        np.testing.assert_allclose(found["miscoupling"], expected["miscoupling"], atol=1e-9)
    for name in ("depth_couplings", "token_couplings"):
        expected, found = getattr(full, name), getattr(free, name)
        assert expected.shape == found.shape
        scale = np.abs(expected).max()
        np.testing.assert_allclose(np.abs(found), np.abs(expected), rtol=0, atol=1e-9 * scale)
    np.testing.assert_allclose(free.factors["s"], full.factors["s"], rtol=1e-10)
    again = measure(model, "matrix_free")
    assert table(again.depth).equals(table(free.depth))
    assert table(again.tokens).equals(table(free.tokens))
