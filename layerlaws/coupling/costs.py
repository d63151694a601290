"""What the matrix-free coupling (``coupling.svd: matrix_free``) costs, in Jacobian–vector
products, from the config alone (no torch: the workflow plans jobs with it).

A product (one VJP or JVP, ``layerlaws.coupling.operators``) costs about one backward pass
of one block over the prompt's T tokens. The randomised SVD's settings are here so that
the plan counts what the measurement does.
"""

from __future__ import annotations

from collections.abc import Sequence

OVERSAMPLING = 10
"""Columns beyond K of the randomised SVD's sketch (Halko et al.'s p)."""
POWER_STEPS = 4
"""Block Krylov steps of the randomised SVD (Halko et al.'s q)."""


def sketch_products(k: int) -> int:
    """Products of the randomised SVD's block Krylov sketch at K = ``k``: 2 l (q + 1),
    l = K + p columns, q steps (half VJPs, half JVPs)."""
    return 2 * (k + OVERSAMPLING) * (POWER_STEPS + 1)


def factor_products(k: int, width: int) -> int:
    """Products of the top-``k`` factors of one d × d Jacobian (d = ``width``): the
    sketch's, or d VJPs (Jᵀ whole, then its exact SVD) where d is no more than that."""
    return min(sketch_products(k), width)


def coupling_products(count: int, k: int, swapped: bool) -> int:
    """Products of the coupling matrices of one Jacobian with ``count`` factors at K = ``k``
    (twice as many when the swapped released metrics are measured)."""
    return count * k * (2 if swapped else 1)


def prompt_products(
    num_layers: int,
    width: int,
    length: int,
    k: int,
    metrics: Sequence[str],
    layer_pairs: Sequence[tuple[int, int]],
) -> int:
    """Products the matrix-free measurement of one prompt of ``length`` tokens makes: the
    depth measurement (every block's last-token Jacobian: factors and coupling with every
    block) and, at each token layer pair (l, l′), the three token-wise kinds (T, ≤ T and ≤
    T Jacobians, counted as T: factors of layer l′'s, of layer l's too when l ≠ l′ and a
    ``released_*`` metric needs their own values, and every coupling matrix, twice for the
    ``*_swapped`` metrics); K = ``k`` is the largest."""
    swapped = any(metric.endswith("_swapped") for metric in metrics)
    own_values = any(metric.startswith("released_") for metric in metrics)
    depth = num_layers * (factor_products(k, width) + coupling_products(num_layers, k, swapped))
    tokens = 0
    for layer_a, layer_b in layer_pairs:
        factored = 2 if layer_a != layer_b and own_values else 1
        per_kind = length * (
            factored * factor_products(k, width) + coupling_products(length, k, swapped)
        )
        tokens += 3 * per_kind
    return depth + tokens
