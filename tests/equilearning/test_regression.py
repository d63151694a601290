"""PR from streaming moments against numpy.linalg.lstsq in float64."""

import numpy as np
import pytest

from layerlaws.equilearning.regression import Moments, prediction_residuals


def lstsq_pr(x: np.ndarray, y: np.ndarray) -> float:
    """Independent reference: OLS with intercept by numpy.linalg.lstsq on all rows."""
    design = np.hstack([x, np.ones((len(x), 1))])
    coefficients = np.linalg.lstsq(design, y, rcond=None)[0]
    residual = y - design @ coefficients
    return float((residual**2).sum() / ((y - y.mean()) ** 2).sum())


def streamed(x: np.ndarray, y: np.ndarray, chunk: int) -> Moments:
    z = np.hstack([x, y[:, None]])
    total = Moments.empty(z.shape[1])
    for start in range(0, len(z), chunk):
        total = total + Moments.of_rows(z[start : start + chunk])
    return total


def test_well_conditioned_matches_lstsq():
    rng = np.random.default_rng(0)
    x = rng.normal(size=(3000, 20))
    y = x @ rng.normal(size=20) + rng.normal(size=3000) * 3 + 7
    pr, rank = prediction_residuals(streamed(x, y, 257), 20)
    assert rank == 20
    assert abs(pr[0] - lstsq_pr(x, y)) / lstsq_pr(x, y) <= 1e-8


def test_anisotropic_large_norms_match_lstsq():
    rng = np.random.default_rng(1)
    n, d = 5000, 48
    # Correlated features whose scales span five orders of magnitude, offset by ~1e4, like
    # a raw residual stream with massive activations.
    scales = np.logspace(-1, 4, d)
    mixing = np.linalg.qr(rng.normal(size=(d, d)))[0]
    x = (rng.normal(size=(n, d)) * scales) @ mixing + 1e4
    assert np.linalg.norm(x, axis=1).mean() > 1e4
    y = rng.integers(0, 50_000, size=n).astype(float) + x[:, 0] * 0.3
    pr, _ = prediction_residuals(streamed(x, y, 1000), d)
    reference = lstsq_pr(x, y)
    assert abs(pr[0] - reference) / reference <= 1e-6


def test_chunked_equals_whole_and_removal_inverts_merge():
    rng = np.random.default_rng(2)
    z = rng.normal(size=(500, 6)) * [1, 10, 100, 1e3, 1, 5] + 50
    whole = Moments.of_rows(z)
    chunked = streamed(z[:, :5], z[:, 5], 37)
    np.testing.assert_allclose(chunked.comoment, whole.comoment, rtol=1e-10)
    np.testing.assert_allclose(chunked.mean, whole.mean, rtol=1e-12)
    part = Moments.of_rows(z[::7])
    rest = whole - part
    mask = np.ones(len(z), bool)
    mask[::7] = False
    direct = Moments.of_rows(z[mask])
    assert rest.n == direct.n
    np.testing.assert_allclose(rest.comoment, direct.comoment, rtol=1e-9, atol=1e-9)
    np.testing.assert_allclose(rest.mean, direct.mean, rtol=1e-12)


def test_several_targets_at_once_and_column_selection():
    rng = np.random.default_rng(3)
    x = rng.normal(size=(800, 5))
    targets = np.column_stack([x @ rng.normal(size=5) + rng.normal(size=800) for _ in range(3)])
    moments = Moments.of_rows(np.hstack([x, targets]))
    pr, _ = prediction_residuals(moments, 5)
    for j in range(3):
        assert pr[j] == pytest.approx(lstsq_pr(x, targets[:, j]), rel=1e-9)
    only_second = moments.select([0, 1, 2, 3, 4, 6])
    assert prediction_residuals(only_second, 5)[0][0] == pytest.approx(pr[1], rel=1e-12)


def test_rank_deficient_features_use_the_cutoff():
    rng = np.random.default_rng(4)
    base = rng.normal(size=(400, 4))
    x = np.hstack([base, base[:, :2] * 2.0])  # two exactly dependent columns
    y = base @ [1.0, -2.0, 0.5, 0.0] + rng.normal(size=400)
    pr, rank = prediction_residuals(Moments.of_rows(np.hstack([x, y[:, None]])), 6)
    assert rank == 4
    assert pr[0] == pytest.approx(lstsq_pr(x, y), rel=1e-8)


@pytest.mark.parametrize(("cutoff", "rank"), [(1e-4, 4), (1e-10, 5)])
def test_the_cutoff_decides_which_weak_directions_count(cutoff, rank):
    """``equilearning.cutoff``: a fifth feature is the first plus 1e-3 × z, so the
    co-moment's smallest eigenvalue is about 2e-7 of its largest, and the target holds
    2 z. A cut-off above that ratio drops the direction (z unexplained), one below keeps
    it; each PR against float64 lstsq on the centred rows with rcond = √cutoff (singular
    values are the eigenvalues' square roots)."""
    rng = np.random.default_rng(6)
    base, z = rng.normal(size=(400, 4)), rng.normal(size=400)
    x = np.hstack([base, base[:, :1] + 1e-3 * z[:, None]])
    y = base @ [1.0, -2.0, 0.5, 1.0] + 2.0 * z + 0.1 * rng.normal(size=400)
    pr, found_rank = prediction_residuals(Moments.of_rows(np.hstack([x, y[:, None]])), 5, cutoff)
    design, centred = x - x.mean(axis=0), y - y.mean()
    solution = np.linalg.lstsq(design, centred, rcond=np.sqrt(cutoff))[0]
    expected = ((centred - design @ solution) ** 2).sum() / (centred**2).sum()
    assert found_rank == rank
    assert pr[0] == pytest.approx(expected, rel=1e-6)
    assert (pr[0] > 0.1) == (rank == 4)  # z: about 40 % of the variance


def test_constant_target_gives_nan_and_perfect_fit_gives_zero():
    x = np.random.default_rng(5).normal(size=(100, 3))
    constant = Moments.of_rows(np.hstack([x, np.full((100, 1), 4.0)]))
    assert np.isnan(prediction_residuals(constant, 3)[0][0])
    exact = Moments.of_rows(np.hstack([x, (x @ [1.0, 2.0, 3.0])[:, None]]))
    assert prediction_residuals(exact, 3)[0][0] == pytest.approx(0.0, abs=1e-12)


def test_rank_deficient_features_at_a_large_scale_use_a_relative_cutoff():
    """Features of the size of raw hidden states (about 1e6) with two exactly dependent
    columns: the rounding error of the co-moment leaves eigenvalues of order 0.1 in the
    dependent directions, far above an absolute 1e-12 but far below 1e-12 × the largest
    (about 1e15). Dropped relative to the largest, they leave PR equal to lstsq's for
    every target."""
    rng = np.random.default_rng(4)
    base = rng.normal(size=(400, 4)) * 1e6
    x = np.hstack([base, base[:, :2] * 2.0 + base[:, 2:3] * 0.5])
    targets = np.column_stack(
        [base @ weights / 1e6 + rng.normal(size=400) for weights in np.eye(4)[:3] + 0.5]
    )
    moments = Moments.of_rows(np.hstack([x, targets]))
    eigenvalues = np.linalg.eigvalsh(moments.comoment.numpy()[:6, :6])
    assert eigenvalues.max() > 1e14 and np.abs(eigenvalues[:2]).max() > 1e-3
    pr, rank = prediction_residuals(moments, 6)
    assert rank == 4
    expected = [lstsq_pr(x, targets[:, j]) for j in range(3)]
    np.testing.assert_allclose(pr, expected, rtol=1e-8)
