"""Geometry of row vectors, in NumPy (no torch): cosine-similarity matrices, their
off-diagonal entries and the correlation R_cos of two of them (Yao & Xu, §4 and §6), and
the plane of the first two principal components (He & Su's token views, Fig. 2; Aubry et
al.'s trajectories, Appendix A.2.1).

Everything is computed in float64; ``cosine_matrix`` casts its result to the dtype asked
for at the end, so a float32 caller gets the float64 result rounded once.
"""

from __future__ import annotations

import numpy as np
from numpy.typing import DTypeLike
from scipy import sparse


def cosine_matrix(rows: np.ndarray | sparse.spmatrix, dtype: DTypeLike = np.float64) -> np.ndarray:
    """Cosine similarity of every pair of rows of a dense or sparse (n, d) matrix, shape
    (n, n) in ``dtype``, computed in float64; a zero row has cosine 0 with every row
    (itself included). Sparse rows are never densified, only the (n, n) result."""
    if sparse.issparse(rows):
        squares = rows.multiply(rows).sum(axis=1)
        norms = np.sqrt(np.asarray(squares, dtype=np.float64).ravel())
        unit = sparse.diags(1.0 / np.where(norms > 0, norms, 1.0)) @ rows.astype(np.float64)
        return (unit @ unit.T).toarray().astype(dtype)
    dense = np.asarray(rows, dtype=np.float64)
    norms = np.linalg.norm(dense, axis=1, keepdims=True)
    unit = dense / np.where(norms > 0, norms, 1.0)
    return (unit @ unit.T).astype(dtype)


def off_diagonal(matrix: np.ndarray) -> np.ndarray:
    """Entries above the diagonal of a symmetric (n, n) matrix, row by row, shape
    (n(n−1)/2,) float64."""
    upper = np.triu_indices(len(matrix), k=1)
    return matrix[upper].astype(np.float64)


def r_cos(first: np.ndarray, second: np.ndarray) -> float:
    """R_cos: the Pearson correlation of the off-diagonal entries of two (n, n) similarity
    matrices (NaN when either is constant)."""
    return float(np.corrcoef(off_diagonal(first), off_diagonal(second))[0, 1])


def principal_plane(points: np.ndarray, fitted_on: np.ndarray | None = None) -> np.ndarray:
    """Points (..., d) centred and projected on the first two principal components of
    ``fitted_on`` (m, d) (by default ``points`` (n, d) themselves), centred by the mean of
    ``fitted_on``: shape (..., 2) float64; a component the fitted points do not span is 0."""
    points = np.asarray(points, dtype=np.float64)
    fitted = points if fitted_on is None else np.asarray(fitted_on, dtype=np.float64)
    mean = fitted.mean(axis=0)
    _, _, components = np.linalg.svd(fitted - mean, full_matrices=False)
    projected = (points - mean) @ components[:2].T
    missing = 2 - projected.shape[-1]
    return np.pad(projected, [(0, 0)] * (projected.ndim - 1) + [(0, missing)])
