"""Jacobians of residual branches by batched vector–Jacobian products, and their SVDs.

For output token t2, the VJP of f^l with the cotangent e_{t2,i} gives row i of
J^l_{t1 t2} = ∂f^l(X)_{t2} / ∂x_{t1} for every input token t1 at once; the d rows are
batched with ``torch.func.vmap`` in chunks of ``chunk`` cotangents, so memory holds
``chunk`` × T × d gradients, not d × T × d.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import torch
from torch.func import vjp, vmap

Branch = Callable[[torch.Tensor], torch.Tensor]


def jacobian_rows(
    branch: Branch,
    stream: torch.Tensor,
    output_token: int,
    input_tokens: Sequence[int],
    chunk: int = 64,
) -> torch.Tensor:
    """J_{t1, t2} for t2 = ``output_token`` and each t1 in ``input_tokens``.

    ``stream`` is X (T, d). Returns (len(input_tokens), d, d): entry [k, i, j] is
    ∂f(X)_{t2, i} / ∂x_{input_tokens[k], j}.
    """
    length, width = stream.shape
    _, pullback = vjp(branch, stream[None])
    wanted = torch.as_tensor(list(input_tokens), dtype=torch.long)
    rows = []
    for start in range(0, width, chunk):
        index = torch.arange(start, min(start + chunk, width))
        cotangents = torch.zeros(
            len(index), 1, length, width, dtype=stream.dtype, device=stream.device
        )
        cotangents[torch.arange(len(index)), 0, output_token, index] = 1
        (gradients,) = vmap(pullback)(cotangents)
        rows.append(gradients[:, 0, wanted, :])
    return torch.cat(rows).transpose(0, 1).contiguous()


def top_singular(
    matrix: torch.Tensor, k: int, method: str = "full"
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Top-``k`` singular triplets (U (d, k), S (k,), V (d, k)) of a (d, d) matrix, by a
    full SVD or a randomised one (``torch.svd_lowrank``, 2k columns, 4 power steps)."""
    if method == "randomized":
        u, s, v = torch.svd_lowrank(matrix, q=min(2 * k, min(matrix.shape)), niter=4)
        return u[:, :k], s[:k], v[:, :k]
    u, s, vh = torch.linalg.svd(matrix)
    return u[:, :k], s[:k], vh[:k].T
