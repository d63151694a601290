"""Coupling of Jacobians (Aubry et al., §3.1), by the paper's metric or by the authors'
released code's.

The coupling matrix of J with the top-K singular vectors (U′_K, V′_K) of another Jacobian
J′ is A = U′_Kᵀ J V′_K (K × K). The metrics (``coupling.metrics``), each 0 when J′'s
singular vectors diagonalise J:
- ``paper`` (Aubry et al., Eq. 14): m̃(A) = ‖A − Diag(A)‖_F / ‖A‖_F; about sqrt(1 − 1/K)
  when the vectors are unrelated (A is then like a K × K matrix of independent entries,
  whose off-diagonal holds a fraction 1 − 1/K of the squared mass);
- ``unnormalised`` (Aubry et al., Eq. 13): m(A) = ‖A − Diag(A)‖_F, the off-diagonal mass
  itself, in the units of J (what §5.4 averages over layer pairs and prompts);
- ``released_trace``: ‖|A| − S_K‖_F / tr(S_K), with |A| elementwise and S_K = diag(s_1…s_K)
  the top-K singular values of J itself (the released code's ``ujv`` ``trace`` metric);
- ``released_norm``: ‖|A| − S_K‖_F / ‖(s_1…s_K)‖_2 (``ujv``, ``norm``);
- ``released_trace_swapped``, ``released_norm_swapped``: the same with U′ and V′ swapped,
  A = V′_Kᵀ J U′_K (the released code's ``vju``).
The released metrics are not bounded by 1.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from functools import partial

import torch

from layerlaws.core.errors import LayerlawsError
from layerlaws.coupling.operators import DenseJacobian, Factors, coupling_stack

PAPER = "paper"


@dataclass(frozen=True)
class Metric:
    """One coupling metric: how it is taken from a stack of coupling matrices."""

    measure: Callable[[torch.Tensor, torch.Tensor], torch.Tensor]
    """(A (n, K, K) float64, J's own top-K singular values (K,)) → the metric (n,)."""
    own_values: bool = False
    """Whether it needs J's own singular values (else ``measure`` ignores them)."""
    swapped: bool = False
    """Whether its A is V′ᵀ J U′ (U′ and V′ swapped) rather than U′ᵀ J V′."""


def miscoupling(coupling: torch.Tensor) -> float:
    """m̃(A) = ‖A − Diag(A)‖_F / ‖A‖_F of a square matrix A (the paper's metric)."""
    return float(_paper(coupling.double()[None])[0])


def _off_diagonal(couplings: torch.Tensor) -> torch.Tensor:
    """m(A) = ‖A − Diag(A)‖_F of each (K, K) matrix of a stack (n, K, K) (Eq. 13)."""
    return torch.linalg.matrix_norm(couplings - torch.diag_embed(couplings.diagonal(0, -2, -1)))


def _paper(couplings: torch.Tensor) -> torch.Tensor:
    """m̃ of each (K, K) matrix of a stack (n, K, K); NaN for a zero matrix."""
    total = torch.linalg.matrix_norm(couplings)
    return torch.where(total > 0, _off_diagonal(couplings) / total, torch.nan)


def _released(couplings: torch.Tensor, values: torch.Tensor, normaliser: str) -> torch.Tensor:
    """‖|A| − diag(values)‖_F / tr or ‖·‖_2 of ``values`` (K,), for each A of (n, K, K)."""
    difference = torch.linalg.matrix_norm(couplings.abs() - torch.diag(values))
    scale = values.sum() if normaliser == "trace" else torch.linalg.vector_norm(values)
    return difference / scale


METRICS: dict[str, Metric] = {
    PAPER: Metric(lambda couplings, _: _paper(couplings)),
    "unnormalised": Metric(lambda couplings, _: _off_diagonal(couplings)),
    "released_trace": Metric(partial(_released, normaliser="trace"), own_values=True),
    "released_norm": Metric(partial(_released, normaliser="norm"), own_values=True),
    "released_trace_swapped": Metric(
        partial(_released, normaliser="trace"), own_values=True, swapped=True
    ),
    "released_norm_swapped": Metric(
        partial(_released, normaliser="norm"), own_values=True, swapped=True
    ),
}
"""The coupling metrics by name (the schema's ``coupling.metrics`` allows these, in this
order), ``paper`` first (the default, with ``unnormalised``)."""


def metric_values(
    metric: str, couplings: torch.Tensor, swapped: torch.Tensor | None, values: torch.Tensor
) -> torch.Tensor:
    """``metric`` of each coupling matrix: ``couplings`` (n, K, K) are U′ᵀ J V′,
    ``swapped`` V′ᵀ J U′ (None when no swapped metric is asked for), ``values`` (K,) J's
    own top-K singular values (unused by the metrics without ``own_values``); float64
    (n,)."""
    chosen = METRICS[metric]
    return chosen.measure(swapped if chosen.swapped else couplings, values)


def miscoupling_matrices(
    jacobians: Sequence[torch.Tensor],
    values: Sequence[torch.Tensor] | None,
    factors: Sequence[Factors],
    ks: Sequence[int],
    metrics: Sequence[str] = (PAPER,),
) -> dict[tuple[str, int], torch.Tensor]:
    """M[a, b] of every metric and K: the formed Jacobian J_a (d, d), with its own top
    singular values ``values[a]`` (at least max K; None will do for ``paper`` and
    ``unnormalised``), coupled with the top-K singular vectors of ``factors[b]``
    (``metric_matrices`` of their coupling matrices). Returns {(metric, K): (n_a, n_b)
    float64 on the CPU}."""
    operators = [DenseJacobian(jacobian) for jacobian in jacobians]
    k_max, swapped = max(ks), needs_swapped(metrics)
    return metric_matrices(
        torch.stack([coupling_stack(op, factors, k_max) for op in operators]),
        torch.stack([coupling_stack(op, factors, k_max, True) for op in operators])
        if swapped
        else None,
        None if values is None else [own[:k_max] for own in values],
        ks,
        metrics,
    )


def needs_swapped(metrics: Sequence[str]) -> bool:
    """Whether some of ``metrics`` need the swapped coupling matrices V′ᵀ J U′."""
    return any(METRICS[metric].swapped for metric in metrics if metric in METRICS)


def needs_own_values(metrics: Sequence[str]) -> bool:
    """Whether some of ``metrics`` need each Jacobian's own singular values."""
    return any(METRICS[metric].own_values for metric in metrics if metric in METRICS)


def metric_matrices(
    couplings: torch.Tensor,
    swapped: torch.Tensor | None,
    values: Sequence[torch.Tensor] | None,
    ks: Sequence[int],
    metrics: Sequence[str] = (PAPER,),
) -> dict[tuple[str, int], torch.Tensor]:
    """M[a, b] of every metric and K from the coupling matrices A[a, b] = U′_bᵀ J_a V′_b
    (n_a, n_b, K_max, K_max) at the largest K (A_K is their top-left K × K block), the
    swapped ones V′_bᵀ J_a U′_b (the same shape; None unless ``needs_swapped``) and J_a's
    own top singular values ``values[a]`` (at least K_max; None will do for ``paper`` and
    ``unnormalised``). However the A were made (formed Jacobians or matrix-free
    products), this is where every metric is taken. Returns {(metric, K): (n_a, n_b)
    float64 on the CPU}."""
    unknown = [metric for metric in metrics if metric not in METRICS]
    if unknown:
        raise LayerlawsError(
            f"coupling.metrics: unknown {unknown}; expected some of {', '.join(METRICS)}"
        )
    if values is None:
        if needs_own_values(metrics):
            raise LayerlawsError(
                f"coupling.metrics {list(metrics)}: the released metrics need each Jacobian's "
                "own singular values"
            )
        values = [torch.zeros(0)] * len(couplings)
    rows: dict[tuple[str, int], list[torch.Tensor]] = {(m, k): [] for m in metrics for k in ks}
    for a, own in zip(range(len(couplings)), values, strict=True):
        for k in ks:
            for metric in metrics:
                rows[metric, k].append(
                    metric_values(
                        metric,
                        couplings[a, :, :k, :k].double(),
                        None if swapped is None else swapped[a, :, :k, :k].double(),
                        own[:k].double(),
                    ).cpu()
                )
    return {key: torch.stack(row) for key, row in rows.items()}
