"""The geometry quantities of a layer from its float64 moments (NumPy, at table time), and
the matrix-based Rényi entropy of spectra (torch: batched over a batch's texts on the
device while the pass runs, and at table time)."""

from __future__ import annotations

import numpy as np
import torch


def renyi_entropy(eigenvalues: torch.Tensor, alpha: float) -> torch.Tensor:
    """The matrix-based entropy of Skean et al. (2025, §3) of positive semi-definite
    matrices given their eigenvalues (..., k): with p = λ / Σλ (rounding below 0 clipped),
    S_α = log(Σ pᵅ) / (1 − α), and at α = 1 its limit −Σ p log p (0 log 0 = 0). In nats,
    shape (...); NaN where a spectrum holds NaN or is all zero. Zero eigenvalues count
    for nothing, so a matrix and a zero-padded one have the same entropy."""
    values = eigenvalues.clamp(min=0)
    p = values / values.sum(dim=-1, keepdim=True)
    if alpha == 1:
        return -torch.xlogy(p, p).sum(dim=-1)
    return torch.log((p**alpha).sum(dim=-1)) / (1 - alpha)


def spectrum(matrix: np.ndarray) -> np.ndarray:
    """Eigenvalues of a symmetric (d, d) float64 matrix, largest first
    (``numpy.linalg.eigvalsh``); all NaN when the matrix holds NaN or infinity."""
    if not np.isfinite(matrix).all():
        return np.full(len(matrix), np.nan)
    return np.linalg.eigvalsh(matrix)[::-1]


def spectral_entropy(matrix: np.ndarray, alpha: float) -> float:
    """``renyi_entropy`` of a symmetric matrix's spectrum, nats."""
    return float(renyi_entropy(torch.from_numpy(spectrum(matrix).copy()), alpha))


def effective_rank(second_moment: np.ndarray, n_rows: int, epsilon: float) -> float:
    """RankMe (Garrido et al. 2023, §3) of the (n, d) matrix Z of the rows whose uncentred
    second moment ZᵀZ is ``second_moment``: with σ_k = √λ_k(ZᵀZ) the min(n, d) largest
    singular values of Z, p_k = σ_k / Σσ + ε, RankMe = exp(−Σ p_k log p_k). An eigenvalue
    below d·ε₆₄·λ_max (ε₆₄ float64's machine epsilon; NumPy's ``matrix_rank`` tolerance)
    counts as a zero singular value: rounding leaves a zero eigenvalue of ZᵀZ near
    ε₆₄·λ_max, whose square root, about 1e-8·σ_max, RankMe would add up in a layer of rank
    below min(n, d)."""
    values = spectrum(second_moment)[: min(n_rows, len(second_moment))]
    floor = len(second_moment) * np.finfo(np.float64).eps * values.max(initial=0.0)
    singular = np.sqrt(np.where(values > floor, values, 0.0))
    p = singular / singular.sum() + epsilon
    return float(np.exp(-(p * np.log(p)).sum()))


def power_law_decay(covariance: np.ndarray, n_rows: int, ranks: tuple[int, int]) -> float:
    """α-ReQ's decay coefficient α (Agrawal et al. 2022): the decay of the covariance's
    eigenvalues λ_r ∝ r^−α, fitted by least squares of log λ_r on log r weighted by 1/r
    over ranks ``ranks`` (first and last, 1 = largest), cut to the covariance's rank
    min(d, n − 1). NaN with fewer than two ranks to fit, or a non-positive eigenvalue among
    them."""
    values = spectrum(covariance)
    first, last = ranks
    last = min(last, len(values), n_rows - 1)
    if last - first < 1 or not (values[first - 1 : last] > 0).all():
        return float("nan")
    rank = np.arange(first, last + 1, dtype=np.float64)
    design = np.column_stack([-np.log(rank), np.ones_like(rank)])
    weighted = design / rank[:, None]
    target = np.log(values[first - 1 : last])
    slope, _ = np.linalg.solve(design.T @ weighted, weighted.T @ target)
    return float(slope)


def linear_cka(cross: np.ndarray, first: np.ndarray, second: np.ndarray) -> float:
    """Linear CKA (Kornblith et al. 2019, 'Comparing Similarity Structures') of two layers'
    states X, Y of the same rows, centred column-wise (their 'Problem Statement'):
    ‖XᵀY‖²_F / (‖XᵀX‖_F ‖YᵀY‖_F), with ``cross`` = XᵀY, ``first`` = XᵀX, ``second`` = YᵀY."""
    return float(np.linalg.norm(cross) ** 2 / (np.linalg.norm(first) * np.linalg.norm(second)))
