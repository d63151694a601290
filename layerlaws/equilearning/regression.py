"""Ordinary least squares with intercept from streaming float64 moments.

The prediction residual (fraction of variance unexplained) of the least-squares fit of a
target y on features x with an intercept is

    PR = Σ (y − ŷ)² / Σ (y − ȳ)² = 1 − cᵀ C⁺ c / v,

with C = Σ (x − x̄)(x − x̄)ᵀ the centred co-moment of the features, c = Σ (x − x̄)(y − ȳ)
and v = Σ (y − ȳ)². All three are blocks of one co-moment matrix of the joined rows
z = [x, y], which ``Moments`` accumulates chunk by chunk (on the device where the rows
are), so memory does not grow with the number of rows. C⁺ is the pseudo-inverse through
an eigendecomposition in which eigenvalues below ``cutoff × largest eigenvalue`` are
dropped (hidden states are badly conditioned: their norms reach thousands); with the
default cutoff 1e-12 this agrees with ``numpy.linalg.lstsq`` wherever the features have
full rank. When C is certainly better
conditioned than the cutoff (LAPACK's condition estimate), nothing would be dropped and
the same number comes from a Cholesky solve, several times cheaper.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch
from scipy.linalg import lapack

from layerlaws.core.products import add_gram_, gram

DEFAULT_CUTOFF = 1e-12


@dataclass
class Moments:
    """Count, mean and centred co-moment of row vectors z of width p, float64 tensors on
    the device of the rows (statistics stay where the model runs; the solve is on the
    CPU)."""

    n: int
    """Number of rows."""
    mean: torch.Tensor
    """Mean row, shape (p,) float64."""
    comoment: torch.Tensor
    """Unnormalised centred co-moment Σ (z − mean)(z − mean)ᵀ, shape (p, p) float64."""

    @classmethod
    def empty(cls, width: int, device: torch.device | str = "cpu") -> Moments:
        return cls(
            0,
            torch.zeros(width, dtype=torch.float64, device=device),
            torch.zeros(width, width, dtype=torch.float64, device=device),
        )

    @classmethod
    def of_rows(cls, rows: torch.Tensor | np.ndarray) -> Moments:
        """Moments of ``rows``, shape (n, p), computed in float64 on their device."""
        z = torch.as_tensor(rows).to(torch.float64)
        if len(z) == 0:
            return cls.empty(z.shape[1], z.device)
        mean = z.mean(dim=0)
        centred = z - mean
        return cls(len(z), mean, gram(centred))

    def __add__(self, other: Moments) -> Moments:
        """Moments of the union of two disjoint row sets (Chan, Golub & LeVeque merge).

        With δ = mean_b − mean_a: M = M_a + M_b + δδᵀ · n_a n_b / n.
        """
        if other.n == 0:
            return self
        if self.n == 0:
            return other
        n = self.n + other.n
        delta = other.mean - self.mean
        comoment = (
            self.comoment + other.comoment + torch.outer(delta, delta) * (self.n * other.n / n)
        )
        return Moments(n, self.mean + delta * (other.n / n), comoment)

    def add_rows_(self, rows: torch.Tensor) -> None:
        """Merge ``rows`` (n, p) into these moments in place, on their device, without a
        second p × p matrix: the rows' centred product is accumulated straight into the
        co-moment (one matrix product), then the mean shift (a rank-one update)."""
        z = rows.to(torch.float64)
        if len(z) == 0:
            return
        mean = z.mean(dim=0)
        centred = z - mean
        if self.n == 0:
            self.comoment.zero_()
            self.mean.copy_(mean)
        else:
            delta = mean - self.mean
            total = self.n + len(z)
            self.comoment.addr_(delta, delta, alpha=self.n * len(z) / total)
            self.mean.add_(delta, alpha=len(z) / total)
        add_gram_(self.comoment, centred)
        self.n += len(z)

    def merge_(self, other: Moments) -> None:
        """``self = self + other`` in place (no second p × p matrix is allocated)."""
        if other.n == 0:
            return
        if self.n == 0:
            self.n, self.mean, self.comoment = other.n, other.mean.clone(), other.comoment.clone()
            return
        n = self.n + other.n
        delta = other.mean - self.mean
        self.comoment.add_(other.comoment).add_(
            torch.outer(delta, delta), alpha=self.n * other.n / n
        )
        self.mean.add_(delta, alpha=other.n / n)
        self.n = n

    def __sub__(self, part: Moments) -> Moments:
        """Moments of the rows left after removing ``part`` (rows that were added): the
        merge formula solved for one of its operands."""
        if part.n == 0:
            return self
        rest = self.n - part.n
        if rest <= 0:
            raise ValueError(f"cannot remove {part.n} rows from {self.n}")
        part = part.to(self.mean.device)
        rest_mean = (self.n * self.mean - part.n * part.mean) / rest
        delta = part.mean - rest_mean
        comoment = (
            self.comoment - part.comoment - torch.outer(delta, delta) * (rest * part.n / self.n)
        )
        return Moments(rest, rest_mean, comoment)

    def select(self, columns: list[int]) -> Moments:
        """Moments of the chosen columns only."""
        index = torch.as_tensor(columns, device=self.mean.device)
        return Moments(self.n, self.mean[index], self.comoment[index][:, index])

    def to(self, device: torch.device | str) -> Moments:
        return Moments(self.n, self.mean.to(device), self.comoment.to(device))


CONDITION_MARGIN = 1e3
"""Safety factor on LAPACK's condition estimate before the pseudo-inverse is skipped."""


def _explained_by_cholesky(
    features: np.ndarray, cross: np.ndarray, cutoff: float
) -> np.ndarray | None:
    """cᵀC⁻¹c per target column through a Cholesky factorisation, or None when C may have
    an eigenvalue below ``cutoff`` × its largest.

    For a symmetric matrix the 2-norm condition number is at most the 1-norm one, which
    LAPACK estimates (``dpocon``, within a small factor); when that estimate, times
    CONDITION_MARGIN, stays below 1 / cutoff, no eigenvalue would be cut and C⁺ = C⁻¹.
    """
    factor, info = lapack.dpotrf(features, lower=True)
    if info != 0:
        return None
    norm_1 = np.abs(features).sum(axis=0).max()
    reciprocal_condition, info = lapack.dpocon(factor, norm_1, uplo="L")
    if info != 0 or reciprocal_condition < CONDITION_MARGIN * cutoff:
        return None
    solution, info = lapack.dpotrs(factor, cross, lower=True)
    if info != 0:
        return None
    return (cross * solution).sum(axis=0)


def prediction_residuals(
    moments: Moments, n_features: int, cutoff: float = DEFAULT_CUTOFF
) -> tuple[np.ndarray, int]:
    """PR of each target column regressed on the first ``n_features`` columns.

    Returns (pr of shape (n_targets,), rank kept in the pseudo-inverse). A target with
    zero variance gives NaN.
    """
    d = n_features
    comoment = moments.comoment.cpu().numpy()
    features = comoment[:d, :d]
    cross = comoment[:d, d:]
    target_variance = np.diag(comoment)[d:]
    explained = _explained_by_cholesky(features, cross, cutoff)
    if explained is None:
        eigenvalues, eigenvectors = np.linalg.eigh(features)
        keep = eigenvalues > cutoff * max(eigenvalues.max(), 0.0)
        projected = eigenvectors[:, keep].T @ cross
        explained = (projected**2 / eigenvalues[keep, None]).sum(axis=0)
        rank = int(keep.sum())
    else:
        rank = d
    residual = np.maximum(target_variance - explained, 0.0)
    with np.errstate(invalid="ignore", divide="ignore"):
        pr = np.where(target_variance > 0, residual / target_variance, np.nan)
    return pr, rank
