"""core.geometry against independent references: scipy's cosine distance, numpy's
correlation and eigendecomposition, and a hand-made projection."""

import numpy as np
import pytest
import scipy.stats
from scipy import sparse
from scipy.spatial.distance import cdist

from layerlaws.core.geometry import cosine_matrix, off_diagonal, principal_plane, r_cos


def test_cosine_matrix_is_one_minus_the_cosine_distance():
    rng = np.random.default_rng(0)
    rows = rng.normal(size=(30, 7)) * rng.uniform(0.01, 100, size=(30, 1))
    expected = 1 - cdist(rows, rows, metric="cosine")
    found = cosine_matrix(rows)
    assert found.dtype == np.float64 and found.shape == (30, 30)
    np.testing.assert_allclose(found, expected, atol=1e-12)


def test_cosine_matrix_of_sparse_rows_equals_the_dense_one_in_the_dtype_asked():
    rows = sparse.random(25, 400, density=0.05, random_state=1, format="csr")
    rows = rows + sparse.eye(25, 400, format="csr")  # no zero row
    dense = rows.toarray()
    expected = 1 - cdist(dense, dense, metric="cosine")
    found = cosine_matrix(rows, np.float32)
    assert found.dtype == np.float32 and isinstance(found, np.ndarray)
    np.testing.assert_allclose(found, expected, atol=1e-6)
    assert np.array_equal(found, cosine_matrix(dense, np.float32))


def test_cosine_matrix_rounds_the_float64_result_once():
    rows = np.random.default_rng(2).normal(size=(12, 5)).astype(np.float32)
    assert np.array_equal(cosine_matrix(rows, np.float32), cosine_matrix(rows).astype(np.float32))


@pytest.mark.parametrize("as_sparse", [False, True])
def test_a_zero_row_has_cosine_zero(as_sparse):
    rows = np.random.default_rng(3).normal(size=(6, 4))
    rows[2] = 0
    found = cosine_matrix(sparse.csr_matrix(rows) if as_sparse else rows)
    assert np.all(found[2] == 0) and np.all(found[:, 2] == 0)
    others = np.delete(rows, 2, axis=0)
    np.testing.assert_allclose(
        np.delete(np.delete(found, 2, axis=0), 2, axis=1),
        1 - cdist(others, others, metric="cosine"),
        atol=1e-12,
    )


def test_off_diagonal_lists_the_upper_triangle_row_by_row():
    matrix = np.arange(16, dtype=np.float32).reshape(4, 4)
    expected = [matrix[i, j] for i in range(4) for j in range(i + 1, 4)]
    found = off_diagonal(matrix)
    assert found.dtype == np.float64
    np.testing.assert_array_equal(found, expected)


def test_r_cos_is_pearson_over_the_pairs():
    rng = np.random.default_rng(4)
    first = cosine_matrix(rng.normal(size=(15, 6)))
    second = cosine_matrix(first @ rng.normal(size=(15, 15)) + rng.normal(size=(15, 15)))
    pairs = np.triu(np.ones((15, 15), dtype=bool), k=1)
    expected = scipy.stats.pearsonr(first[pairs], second[pairs]).statistic
    assert r_cos(first, second) == pytest.approx(expected, abs=1e-12)
    assert r_cos(first, first) == pytest.approx(1.0)
    assert r_cos(first, -first) == pytest.approx(-1.0)


def _top_two_components(points: np.ndarray) -> np.ndarray:
    """The top two eigenvectors of the covariance matrix, (2, d): an independent PCA."""
    centred = points - points.mean(axis=0)
    values, vectors = np.linalg.eigh(centred.T @ centred)
    return vectors[:, np.argsort(values)[::-1][:2]].T


def test_principal_plane_matches_an_eigendecomposition_up_to_sign():
    rng = np.random.default_rng(5)
    points = rng.normal(size=(50, 6)) * np.array([5.0, 3.0, 1.0, 0.5, 0.2, 0.1]) + 7.0
    expected = (points - points.mean(axis=0)) @ _top_two_components(points).T
    found = principal_plane(points)
    assert found.shape == (50, 2) and found.dtype == np.float64
    np.testing.assert_allclose(np.abs(found), np.abs(expected), atol=1e-9)
    np.testing.assert_allclose(found.mean(axis=0), 0, atol=1e-12)


def test_principal_plane_fitted_on_other_points_projects_every_point():
    """Trajectories (tokens, layers, d) on the components of their last layer: the earlier
    layers' large spread along e2 does not show on the first component, e1."""
    rng = np.random.default_rng(6)
    trajectories = np.zeros((6, 5, 4))
    trajectories[:, :-1, 1] = rng.normal(scale=100.0, size=(6, 4))
    trajectories[:, -1, 0] = rng.normal(size=6)
    trajectories[:, -1, 2] = 0.1 * rng.normal(size=6)
    last = trajectories[:, -1]
    expected = (trajectories - last.mean(axis=0)) @ _top_two_components(last).T
    found = principal_plane(trajectories, fitted_on=last)
    assert found.shape == (6, 5, 2)
    np.testing.assert_allclose(np.abs(found), np.abs(expected), atol=1e-9)
    assert np.ptp(found[:, :-1, 0]) < 1e-9


@pytest.mark.parametrize("shape", [(1, 3), (5, 1)])
def test_principal_plane_pads_a_component_the_points_do_not_span(shape):
    points = np.arange(np.prod(shape), dtype=float).reshape(shape)
    found = principal_plane(points)
    assert found.shape == (shape[0], 2)
    np.testing.assert_array_equal(found[:, 1], 0.0)
    np.testing.assert_allclose(np.abs(found[:, 0]), np.abs(points - points.mean(axis=0))[:, 0])
