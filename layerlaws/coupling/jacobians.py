"""Jacobians of residual branches by batched vector–Jacobian products, and their SVDs.

For output token t2, the VJP of f^l with the cotangent e_{t2,i} gives row i of
J^l_{t1 t2} = ∂f^l(X)_{t2} / ∂x_{t1} for every input token t1 at once. One forward pass
builds the autograd graph; the d rows are pulled back through it ``vjp_chunk`` cotangents
at a time (``torch.autograd.grad`` with ``is_grads_batched``, which vmaps the backward
pass), so memory holds ``vjp_chunk`` × T × d gradients, not d × T × d. Unlike
``torch.func.vjp`` this needs nothing of the forward pass but ordinary autograd, so it
also differentiates blocks built on custom ``autograd.Function``s (Bloom's GeLU,
RecurrentGemma's square root).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager

import torch

Branch = Callable[[torch.Tensor], torch.Tensor]


def jacobian_rows(
    branch: Branch,
    stream: torch.Tensor,
    output_token: int,
    input_tokens: Sequence[int],
    vjp_chunk: int = 64,
) -> torch.Tensor:
    """J_{t1, t2} for t2 = ``output_token`` and each t1 in ``input_tokens``.

    ``stream`` is X (T, d). Returns (len(input_tokens), d, d): entry [k, i, j] is
    ∂f(X)_{t2, i} / ∂x_{input_tokens[k], j}, in float32 at least (a bfloat16 or float16
    model's Jacobians are widened: the SVDs that follow have no half-precision kernels).
    """
    length, width = stream.shape
    wanted = torch.as_tensor(list(input_tokens), dtype=torch.long)
    rows = []
    with torch.enable_grad():
        inputs = stream[None].detach().clone().requires_grad_(True)
        outputs = branch(inputs)
        for start in range(0, width, vjp_chunk):
            index = torch.arange(start, min(start + vjp_chunk, width))
            cotangents = torch.zeros(
                len(index), 1, length, width, dtype=outputs.dtype, device=outputs.device
            )
            cotangents[torch.arange(len(index)), 0, output_token, index] = 1
            (gradients,) = torch.autograd.grad(
                outputs, inputs, cotangents, retain_graph=True, is_grads_batched=True
            )
            rows.append(gradients[:, 0, wanted, :])
    jacobians = torch.cat(rows).transpose(0, 1).contiguous()
    return jacobians.to(torch.promote_types(jacobians.dtype, torch.float32))


def top_singular(
    matrix: torch.Tensor, k: int, method: str = "full", seed: int = 0
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Top-``k`` singular triplets (U (d, k), S (k,), V (d, k)) of a (d, d) matrix, by a
    full SVD or a randomised one (``torch.svd_lowrank``, 2k columns, 4 power steps) whose
    random projection is drawn from ``seed`` (``coupling.svd_seed``): the same matrix gives
    the same triplets whatever the global random state, which is left as it was."""
    if method == "randomized":
        with _seeded(matrix.device, seed):
            u, s, v = torch.svd_lowrank(matrix, q=min(2 * k, min(matrix.shape)), niter=4)
        return u[:, :k], s[:k], v[:, :k]
    u, s, vh = torch.linalg.svd(matrix)
    return u[:, :k], s[:k], vh[:k].T


@contextmanager
def _seeded(device: torch.device, seed: int) -> Iterator[None]:
    """Within, the generator of ``device`` (the CPU's, or one GPU's) starts from ``seed``;
    after, it and every other generator are as they were before."""
    cuda = [device] if device.type == "cuda" else []
    with torch.random.fork_rng(devices=cuda):
        if cuda:
            with torch.cuda.device(device):
                torch.cuda.manual_seed(seed)
        else:
            torch.default_generator.manual_seed(seed)
        yield
