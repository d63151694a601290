"""Coupling of Jacobians (Aubry et al., §3.1).

The coupling matrix of J with the top-K singular vectors (U′_K, V′_K) of another Jacobian
J′ is A = U′_Kᵀ J V′_K (K × K); the mis-coupling m̃(A) = ‖A − Diag(A)‖_F / ‖A‖_F is 0 when
J′'s singular vectors diagonalise J too (coupled) and about sqrt(1 − 1/K) when they are
unrelated (then A is like a K × K matrix of independent entries, whose off-diagonal
holds a fraction 1 − 1/K of the squared mass).
"""

from __future__ import annotations

from collections.abc import Sequence

import torch


def miscoupling(coupling: torch.Tensor) -> float:
    """m̃(A) = ‖A − Diag(A)‖_F / ‖A‖_F of a square matrix A."""
    total = torch.linalg.matrix_norm(coupling).item()
    off_diagonal = torch.linalg.matrix_norm(coupling - torch.diag(torch.diag(coupling))).item()
    return off_diagonal / total if total > 0 else float("nan")


def miscoupling_matrix(
    jacobians: Sequence[torch.Tensor],
    factors: Sequence[tuple[torch.Tensor, torch.Tensor, torch.Tensor]],
    k: int,
) -> torch.Tensor:
    """M[a, b] = m̃(U_bᵀ J_a V_b) with the top-k singular vectors of J_b; (n, n) float64."""
    n = len(jacobians)
    result = torch.empty(n, n, dtype=torch.float64)
    for a, jacobian in enumerate(jacobians):
        for b, (u, _, v) in enumerate(factors):
            result[a, b] = miscoupling(u[:, :k].T @ jacobian @ v[:, :k])
    return result
