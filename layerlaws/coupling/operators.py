"""Block Jacobians as linear operators, and their top singular factors without forming them
(Aubry et al., §3.1 and §5.4: what the coupling needs of a Jacobian J is its top-K
singular vectors and the coupling matrices U′ᵀ J V′, not J itself).

J = ∂f(X)_{t2} / ∂x_{t1} (d × d) of one block's branch f at the stream X (T, d), between an
input token t1 and an output token t2, is applied to a batch of n vectors at a time:
- ``rmatvec`` (Jᵀ U, a VJP): the cotangent U at output token t2, pulled back through the
  block's autograd graph, read at input token t1;
- ``matvec`` (J V, a JVP): by the double-backward trick, J v = ∂/∂u ⟨Jᵀ u, v⟩ — the pullback
  u ↦ Jᵀ u is built once with ``create_graph`` and differentiated again, the tangent V at
  input token t1, read at output token t2. Unlike ``torch.func.jvp`` this needs nothing
  but ordinary (twice-differentiable) autograd, so it works for blocks built on custom
  ``autograd.Function``s too.
Either is one product per vector; products are batched ``chunk`` at a time through one
vmapped backward pass (``is_grads_batched``), as ``jacobian_rows`` does. A product costs
about one backward pass of the block over the T tokens, whatever t1 and t2.

``randomized_factors`` is a randomised block Krylov SVD (Halko, Martinsson & Tropp 2011,
§4.6; Musco & Musco 2015): 2 (``POWER_STEPS`` + 1) (K + ``OVERSAMPLING``) products,
against the d of forming J (which it does instead where d is no more).
``coupling_stack`` gives the coupling matrices A_b = U_bᵀ J V_b exactly, from Jᵀ applied to
the n_b·K columns of every U_b (n_b·K products). ``DenseJacobian`` wraps a formed J in the
same interface, so that the full and the matrix-free paths share every step after it.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Protocol

import torch

from layerlaws.coupling.costs import OVERSAMPLING, POWER_STEPS, sketch_products
from layerlaws.coupling.jacobians import _seeded

Branch = Callable[[torch.Tensor], torch.Tensor]
Factors = tuple[torch.Tensor, torch.Tensor, torch.Tensor]
"""Top singular triplets U (d, K), S (K,), V (d, K) of a Jacobian."""


class Operator(Protocol):
    """A d × d Jacobian applied to n vectors at once; results in float32 at least."""

    width: int
    """d."""
    device: torch.device
    """Where the products are computed."""

    def matvec(self, vectors: torch.Tensor) -> torch.Tensor:
        """J V for V (d, n): (d, n), n products."""
        ...

    def rmatvec(self, vectors: torch.Tensor) -> torch.Tensor:
        """Jᵀ U for U (d, n): (d, n), n products."""
        ...


class DenseJacobian:
    """A formed Jacobian J (d, d) as an ``Operator`` (its products are matrix products)."""

    def __init__(self, matrix: torch.Tensor) -> None:
        self.matrix, self.width, self.device = matrix, matrix.shape[0], matrix.device

    def matvec(self, vectors: torch.Tensor) -> torch.Tensor:
        return self.matrix @ vectors.to(self.matrix)

    def rmatvec(self, vectors: torch.Tensor) -> torch.Tensor:
        return self.matrix.T @ vectors.to(self.matrix)


class Linearisation:
    """One block's branch f linearised at a stream X (T, d): the forward graph of f(X) is
    built once, the graph of its pullback (for JVPs) on the first JVP; every
    ``TokenJacobian`` of the block shares them. Memory: the two graphs plus ``chunk`` × T ×
    d products at a time."""

    def __init__(self, branch: Branch, stream: torch.Tensor, chunk: int = 64) -> None:
        self.chunk = chunk
        self.length, self.width = stream.shape
        with torch.enable_grad():
            self.inputs = stream[None].detach().clone().requires_grad_(True)
            self.outputs = branch(self.inputs)
        self._cotangent: torch.Tensor | None = None
        self._pullback: torch.Tensor | None = None

    def pull(self, output_token: int, cotangents: torch.Tensor) -> torch.Tensor:
        """Σ_i u_i ∂f(X)_{t2, i} / ∂X for each cotangent u (n, d) at output token t2:
        (n, T, d), the VJPs read at every input token."""
        return self._batched(self.outputs, self.inputs, output_token, cotangents)

    def push(self, input_token: int, tangents: torch.Tensor) -> torch.Tensor:
        """Σ_j v_j ∂f(X) / ∂x_{t1, j} for each tangent v (n, d) at input token t1: (n, T,
        d), the JVPs read at every output token (double backward)."""
        if self._pullback is None:
            with torch.enable_grad():
                self._cotangent = torch.zeros_like(self.outputs, requires_grad=True)
                (self._pullback,) = torch.autograd.grad(
                    self.outputs, self.inputs, self._cotangent, create_graph=True
                )
        return self._batched(self._pullback, self._cotangent, input_token, tangents)

    def _batched(
        self, outputs: torch.Tensor, inputs: torch.Tensor, token: int, vectors: torch.Tensor
    ) -> torch.Tensor:
        """Gradients of ``outputs`` with respect to ``inputs`` (both (1, T, d)) for the
        ``vectors`` (n, d) placed at ``token``, ``chunk`` at a time: (n, T, d)."""
        results = []
        with torch.enable_grad():
            for start in range(0, len(vectors), self.chunk):
                batch = vectors[start : start + self.chunk]
                seeds = torch.zeros(
                    len(batch), *outputs.shape, dtype=outputs.dtype, device=outputs.device
                )
                seeds[:, 0, token] = batch.to(seeds)
                (gradients,) = torch.autograd.grad(
                    outputs, inputs, seeds, retain_graph=True, is_grads_batched=True
                )
                results.append(gradients[:, 0])
        found = torch.cat(results)
        return found.to(torch.promote_types(found.dtype, torch.float32))


class TokenJacobian:
    """J_{t1 t2} = ∂f(X)_{t2} / ∂x_{t1} (d, d) of a ``Linearisation`` as an ``Operator``:
    each product is one VJP or JVP through the block's graph."""

    def __init__(self, linearisation: Linearisation, input_token: int, output_token: int) -> None:
        self.linearisation, self.width = linearisation, linearisation.width
        self.device = linearisation.inputs.device
        self.input_token, self.output_token = input_token, output_token

    def matvec(self, vectors: torch.Tensor) -> torch.Tensor:
        return self.linearisation.push(self.input_token, vectors.T)[:, self.output_token].T

    def rmatvec(self, vectors: torch.Tensor) -> torch.Tensor:
        return self.linearisation.pull(self.output_token, vectors.T)[:, self.input_token].T


def randomized_factors(operator: Operator, k: int, seed: int = 0) -> Factors:
    """Top-``k`` singular triplets U (d, k), S (k,), V (d, k) of the operator's J, in the
    products' dtype (float32 at least).

    Where d is no more than the sketch's 2 l (q + 1) products (l = k + ``OVERSAMPLING``,
    q = ``POWER_STEPS``; ``layerlaws.coupling.costs``), the d VJPs Jᵀ I give J whole and the
    triplets are its exact SVD's: cheaper and exact, and the case of tiny models, where a
    Krylov space of l (q + 1) ≥ d columns would have no room to grow.

    Otherwise a randomised block Krylov SVD (Halko, Martinsson & Tropp 2011, §4.6; Musco
    & Musco 2015), started from Jᵀ: with a Gaussian Ω (d, l) drawn from ``seed`` in a
    forked random state (the same Ω for every J; the global state is left as it was), the
    orthonormal blocks Q_0 = orth(Jᵀ Ω), Q_i = orth(Jᵀ J Q_{i−1}) made orthogonal to the
    earlier ones (by a Householder QR of all of them, so the basis stays orthonormal even
    where J's rank leaves a block deficient), i ≤ q, span C (d, l (q + 1)); the SVD of
    J C = Ũ S Wᵀ gives U = Ũ, V = C W (Rayleigh–Ritz). 2 l (q + 1) products, half VJPs,
    half JVPs.

    Jacobians of trained blocks have flat spectra (SmolLM2-135M, K = 10: s_10/s_11 ≈
    1.01–1.04, s_10/s_21 ≈ 1.06–1.27), so plain subspace iteration converges slowly; the
    Krylov space keeps every iterate. Measured on SmolLM2's last-token Jacobians (blocks 2,
    9, 16, 23, 30) at K = 10: with p = 10 and q = 4 the top-10 singular values are within
    8e-4 (relative) and the smallest cosine of the principal angles between the top-10
    subspaces is ≥ 0.998 (q = 3: 8e-3 and 0.94; p = 5, q = 4: 1e-3 and 0.98; plain subspace
    iteration with p = 10, q = 3: 0.12 and 0.01 on the last block)."""
    width = operator.width
    if width <= sketch_products(k):
        identity = torch.eye(width, dtype=torch.float64, device=operator.device)
        transposed = operator.rmatvec(identity)  # Jᵀ = P S Qᵀ, so J = Q S Pᵀ
        right, values, left_h = torch.linalg.svd(transposed.double())
        dtype = transposed.dtype
        return left_h[:k].T.to(dtype), values[:k].to(dtype), right[:, :k].to(dtype)
    with _seeded(operator.device, seed):
        omega = torch.randn(width, k + OVERSAMPLING, dtype=torch.float64, device=operator.device)
    blocks = [_orthonormal(operator.rmatvec(omega))]  # orthonormal blocks of the Krylov space
    images = []  # J applied to each block
    for _ in range(POWER_STEPS):
        images.append(operator.matvec(blocks[-1]))
        grown = operator.rmatvec(_orthonormal(images[-1])).double()
        basis = torch.cat(blocks, dim=1)
        blocks.append(_orthonormal(torch.cat([basis, grown], dim=1))[:, basis.shape[1] :])
    images.append(operator.matvec(blocks[-1]))
    basis, image = torch.cat(blocks, dim=1), torch.cat(images, dim=1)
    left, values, right_h = torch.linalg.svd(image.double(), full_matrices=False)
    dtype = image.dtype
    v = basis @ right_h[:k].T
    return left[:, :k].to(dtype), values[:k].to(dtype), v.to(dtype)


def coupling_stack(
    operator: Operator, factors: Sequence[Factors], k: int, swapped: bool = False
) -> torch.Tensor:
    """A_b = U_bᵀ J V_b (V_bᵀ J U_b when ``swapped``) for the top-``k`` singular vectors of
    each of ``factors``: (n_b, k, k) float64, exactly, from Jᵀ applied to the n_b·k
    columns of every U_b (V_b when swapped) at once, n_b·k products."""
    left = torch.stack([(f[2] if swapped else f[0])[:, :k] for f in factors])  # (n_b, d, k)
    right = torch.stack([(f[0] if swapped else f[2])[:, :k] for f in factors])
    count = len(factors)
    pulled = operator.rmatvec(left.transpose(0, 1).reshape(operator.width, count * k))
    pulled = pulled.double().reshape(operator.width, count, k).transpose(0, 1)  # Jᵀ U_b
    return pulled.transpose(1, 2) @ right.double()


def _orthonormal(columns: torch.Tensor) -> torch.Tensor:
    """Q (d, l) of the columns' Householder QR in float64: orthonormal, and spanning
    the columns wherever they have full rank."""
    return torch.linalg.qr(columns.double()).Q
