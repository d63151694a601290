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
from layerlaws.coupling.jacobians import _seeded, jacobian_rows

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
    """One block's branch f linearised at a stream X (T, d) over the whole sequence: the
    forward graph of f(X) is built on the first product, the graph of its pullback (for
    JVPs) on the first JVP; every output token's ``OutputToken`` shares them. A product
    costs a backward pass over all T tokens: the fallback of families whose blocks cannot
    be re-run one token at a time (``layerlaws.coupling.local``). Memory: the two graphs
    plus ``chunk`` × T × d products at a time."""

    def __init__(self, branch: Branch, stream: torch.Tensor, chunk: int = 64) -> None:
        self.branch, self.stream, self.chunk = branch, stream, chunk
        self.width = stream.shape[1]
        self._graph: tuple[torch.Tensor, torch.Tensor] | None = None
        self._pullback: tuple[torch.Tensor, torch.Tensor] | None = None

    def _forward(self) -> tuple[torch.Tensor, torch.Tensor]:
        """(X as a leaf (1, T, d), f(X) (1, T, d)), built once."""
        if self._graph is None:
            with torch.enable_grad():
                inputs = self.stream[None].detach().clone().requires_grad_(True)
                self._graph = inputs, self.branch(inputs)
        return self._graph

    def pull(self, output_token: int, input_token: int, cotangents: torch.Tensor) -> torch.Tensor:
        """Jᵀ u of J_{t1 t2} for each cotangent u (n, d) at output token t2: (n, d) at
        input token t1."""
        inputs, outputs = self._forward()
        return batched_gradients(outputs, inputs, output_token, input_token, cotangents, self.chunk)

    def push(self, output_token: int, input_token: int, tangents: torch.Tensor) -> torch.Tensor:
        """J v of J_{t1 t2} for each tangent v (n, d) at input token t1: (n, d) at output
        token t2 (double backward)."""
        if self._pullback is None:
            inputs, outputs = self._forward()
            self._pullback = pullback_graph(outputs, inputs)
        pullback, cotangent = self._pullback
        return batched_gradients(
            pullback, cotangent, input_token, output_token, tangents, self.chunk
        )

    def at(self, output_token: int) -> OutputToken:
        """The products of output token ``output_token``'s Jacobians."""
        return OutputToken(self, output_token)


class OutputToken:
    """The Jacobians J_{t1 t2} of one output token t2 through a whole-sequence
    ``Linearisation``: products, and (``rows``) the Jacobians formed by d VJPs."""

    def __init__(self, linearisation: Linearisation, output_token: int) -> None:
        self.linearisation, self.token = linearisation, output_token
        self.width, self.device = linearisation.width, linearisation.stream.device

    def pull(self, input_token: int, cotangents: torch.Tensor) -> torch.Tensor:
        return self.linearisation.pull(self.token, input_token, cotangents)

    def push(self, input_token: int, tangents: torch.Tensor) -> torch.Tensor:
        return self.linearisation.push(self.token, input_token, tangents)

    def rows(self, input_tokens: Sequence[int]) -> torch.Tensor:
        """J_{t1 t2} formed for each t1 of ``input_tokens``: (n, d, d)."""
        lin = self.linearisation
        return jacobian_rows(lin.branch, lin.stream, self.token, input_tokens, lin.chunk)


class Products(Protocol):
    """Products with the Jacobians J_{t1 t2} of one output token t2 (``OutputToken`` or
    ``layerlaws.coupling.local.LocalLinearisation``)."""

    width: int
    """d."""
    device: torch.device
    """Where the products are computed."""

    def pull(self, input_token: int, cotangents: torch.Tensor) -> torch.Tensor:
        """Jᵀ u for each u (n, d): (n, d)."""
        ...

    def push(self, input_token: int, tangents: torch.Tensor) -> torch.Tensor:
        """J v for each v (n, d): (n, d)."""
        ...

    def rows(self, input_tokens: Sequence[int]) -> torch.Tensor:
        """J_{t1 t2} formed for each t1: (n, d, d)."""
        ...


class TokenJacobian:
    """J_{t1 t2} as an ``Operator``: each product one VJP or JVP of the output token's
    ``Products``."""

    def __init__(self, products: Products, input_token: int) -> None:
        self.products, self.input_token = products, input_token
        self.width, self.device = products.width, products.device

    def matvec(self, vectors: torch.Tensor) -> torch.Tensor:
        return self.products.push(self.input_token, vectors.T).T

    def rmatvec(self, vectors: torch.Tensor) -> torch.Tensor:
        return self.products.pull(self.input_token, vectors.T).T


def pullback_graph(outputs: torch.Tensor, inputs: torch.Tensor) -> tuple[torch.Tensor, ...]:
    """(Jᵀ u as a function of u, u): the pullback of ``outputs`` to ``inputs`` built with
    ``create_graph`` at a zero cotangent u, for JVPs by double backward."""
    with torch.enable_grad():
        cotangent = torch.zeros_like(outputs, requires_grad=True)
        (pullback,) = torch.autograd.grad(outputs, inputs, cotangent, create_graph=True)
    return pullback, cotangent


def batched_gradients(
    outputs: torch.Tensor,
    inputs: torch.Tensor | Sequence[torch.Tensor],
    output_row: int,
    input_row: int | None,
    vectors: torch.Tensor,
    chunk: int,
) -> torch.Tensor:
    """Gradients of ``outputs`` (1, n_out, d) with respect to ``inputs`` (1, n_in, d; or
    several, their rows concatenated in order, from one backward pass) for the
    ``vectors`` (n, d) placed at row ``output_row``, ``chunk`` at a time through one
    vmapped backward pass (``is_grads_batched``), in float32 at least: (n, d) read at
    ``input_row``, or (n, n_in, d) when it is None."""
    inputs = (inputs,) if isinstance(inputs, torch.Tensor) else tuple(inputs)
    results = []
    with torch.enable_grad():
        for start in range(0, len(vectors), chunk):
            batch = vectors[start : start + chunk]
            seeds = torch.zeros(
                len(batch), *outputs.shape, dtype=outputs.dtype, device=outputs.device
            )
            seeds[:, 0, output_row] = batch.to(seeds)
            found = torch.autograd.grad(
                outputs, inputs, seeds, retain_graph=True, is_grads_batched=True
            )
            gradients = torch.cat(found, dim=2)
            results.append(gradients[:, 0] if input_row is None else gradients[:, 0, input_row])
    found = torch.cat(results)
    return found.to(torch.promote_types(found.dtype, torch.float32))


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
