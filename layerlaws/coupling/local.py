"""Jacobian products of one block at their token-local floor (Aubry et al., §3.1).

J_{t1 t2} = ∂f(X)_{t2} / ∂x_{t1} depends on the block's computation for output token t2
alone: in a causal attention block, x_{t2}'s own path (norms, query, attention, MLP) and,
for t1 < t2, the keys and values of the tokens before it. Differentiating the block's
whole-sequence output makes every product pay for every token's MLP; here the block is
re-run for token t2 alone, the keys and values of tokens 0..t2−1 handed to its attention
through a stand-in for transformers' cache (``_KeyValueTap``), so autograd's graph holds
exactly what a product needs:
- ``context=False`` (the depth kind, and the ``self`` token kind, t1 = t2): the earlier
  tokens' keys and values are constants, taken from one recorded whole-sequence call;
  a product costs one token's pass through the block plus its attention over t2 + 1 keys,
  scored apart from the token's own key where the family's attention allows
  (``layerlaws.coupling.split_attention``), so no gradient reaches the constants;
- ``context=True`` (the cross-token kinds, t1 < t2): the earlier tokens X_{<t2} are a
  second input, run through the block once to make their keys and values with a graph;
  a product pulled back to them passes only their key and value projections (autograd
  visits only the nodes between the seeded output and the inputs asked for), and one
  read at t2 itself is as cheap as without context.
Both are exact: the same operations as the whole-sequence block, on the same numbers.

A block is re-run this way only where that reproduces it. Its family must take a cache
argument (``CACHE_ARGUMENTS``) that its attention ``update``s; its other arguments are
cut to the token's rows (``_rows``: the arguments named as masks by rows and key
columns, position tensors by their sequence dimension); and every re-run's output must
equal the whole-sequence block's row to the rounding two orders of the same sums leave
(``rounding_bound``: 3e-14 of its largest entry for a tiny float64 block, 6e-13 at
d_ff = 28,672; float32 rounding in float32, bfloat16's in bfloat16). A float64 model is
traced in float64 throughout (``layerlaws.models.precision``): transformers' float32
softmax and norms, whose rounding depends on how many keys a row holds, left float64
re-runs up to 2e-7 apart on AVX2 CPUs. State-space and recurrent blocks
(Mamba, RWKV, RecurrentGemma, Jamba) and the bidirectional encoders (BERT, RoBERTa) fail
one of these, and so does any family whose arguments are cut otherwise (Bloom's ALiBi
bias runs over key columns only): they keep the whole-sequence products
(``Linearisation``), logged once per block class.
"""

from __future__ import annotations

import inspect
import logging
from collections.abc import Sequence
from typing import Any

import torch

from layerlaws.coupling.operators import batched_gradients, pullback_graph
from layerlaws.coupling.split_attention import split_keys, splittable
from layerlaws.models.blocks import BlockCall, first_output

log = logging.getLogger(__name__)

CACHE_ARGUMENTS = ("past_key_values", "layer_past", "past_key_value")
"""Names under which transformers' blocks take their key/value cache."""
_FALLBACK_LOGGED: set[str] = set()
"""Families whose fallback to whole-sequence products has been logged."""


class _KeyValueTap:
    """Stands for transformers' cache in one block call: keeps the keys and values the
    attention computes (``recorded``) and hands it back ``prefix``'s before them, along
    the sequence dimension ``dim``; stores nothing between calls."""

    def __init__(
        self,
        prefix: tuple[torch.Tensor, torch.Tensor] | None,
        dim: int,
        own: list[tuple[torch.Tensor, torch.Tensor]] | None = None,
    ) -> None:
        self.prefix, self.dim, self.own = prefix, dim, own
        self.recorded: tuple[torch.Tensor, torch.Tensor] | None = None

    def update(
        self, keys: torch.Tensor, values: torch.Tensor, *_args: Any, **_kwargs: Any
    ) -> tuple[torch.Tensor, torch.Tensor]:
        self.recorded = (keys, values)
        if self.own is not None:  # for ``split_attention``
            self.own.append((keys, values))
        if self.prefix is None:
            return keys, values
        return (
            torch.cat([self.prefix[0], keys], dim=self.dim),
            torch.cat([self.prefix[1], values], dim=self.dim),
        )

    def get_seq_length(self, *_args: Any, **_kwargs: Any) -> int:
        return 0 if self.prefix is None else self.prefix[0].shape[self.dim]


def _rows(value: Any, length: int, rows: slice, keys_end: int, mask: bool) -> Any:
    """A block argument made for a sequence of ``length`` tokens, cut to the query tokens
    ``rows`` attending to keys 0..``keys_end``−1: a (…, T, T) ``mask`` by rows and key
    columns, a (T,) tensor by rows, any other tensor along its first non-batch dimension
    of size T (a (1, T, T) rotary table of head size T too); tuples and lists
    element-wise; anything else as it is."""
    if isinstance(value, tuple | list):
        return type(value)(_rows(item, length, rows, keys_end, mask) for item in value)
    if not isinstance(value, torch.Tensor) or value.ndim == 0:
        return value
    if mask and value.ndim >= 2 and value.shape[-2:] == (length, length):
        return value[..., rows, :keys_end]
    dims = [dim for dim in range(min(value.ndim, 1), value.ndim) if value.shape[dim] == length]
    if value.ndim == 1:
        dims = [0] if value.shape[0] == length else []
    if not dims:
        return value
    index: list[Any] = [slice(None)] * value.ndim
    index[dims[0]] = rows
    return value[tuple(index)]


def _cache_argument(block: torch.nn.Module) -> str | None:
    """The name of the block's key/value cache argument, or None."""
    parameters = inspect.signature(block.forward).parameters
    return next((name for name in CACHE_ARGUMENTS if name in parameters), None)


def _named_arguments(call: BlockCall, stream: torch.Tensor) -> dict[str, Any] | None:
    """The block call's arguments by name, the stream included; None where the block
    takes variadic positional arguments."""
    signature = inspect.signature(call.block.forward)
    try:
        bound = signature.bind(stream, *call.args, **call.kwargs)
    except TypeError:
        return None
    named: dict[str, Any] = {}
    for name, value in bound.arguments.items():
        kind = signature.parameters[name].kind
        if kind is inspect.Parameter.VAR_POSITIONAL:
            return None
        named.update(value if kind is inspect.Parameter.VAR_KEYWORD else {name: value})
    return named


class TokenLocalBlock:
    """One block's branch f at a stream X (T, d), re-run one output token at a time with
    the other tokens' keys and values from a cache stand-in (module docstring). ``at``
    gives the ``LocalLinearisation`` of an output token, or None where the block cannot
    be re-run so (then the caller uses whole-sequence products)."""

    def __init__(self, call: BlockCall, stream: torch.Tensor, chunk: int = 64) -> None:
        self.call, self.stream, self.chunk = call, stream, chunk
        self.length = stream.shape[0]
        self.family = call.block.__class__.__name__
        self.split = splittable(call.block)
        weights = [weight for weight in call.block.parameters() if weight.is_floating_point()]
        self.terms = max([self.length, *(size for weight in weights for size in weight.shape)])
        """Terms of the block's longest sum: T keys, or a weight's widest dimension."""
        self.supported = self._prepare()

    def _prepare(self) -> bool:
        """Record the whole-sequence call's keys and values through the tap, and its
        output; False where the block cannot be re-run locally (logged once per family)
        or need not be (a one-token prompt)."""
        self.cache = _cache_argument(self.call.block)
        self.named = _named_arguments(self.call, self.stream[None])
        if self.length < 2:
            return False
        if self.cache is None or self.named is None:
            return self._fall_back("its block takes no key/value cache")
        try:
            with torch.no_grad():
                self.reference = self._output(self.stream[None], slice(None), self.length, None)
                whole = self.call.output(self.stream[None])
        except Exception as error:  # a family's own cache calls, beyond update
            return self._fall_back(f"its call with a key/value tap fails: {error!r}")
        if self.tap.recorded is None or not _close(self.reference, whole, self.terms):
            return self._fall_back("its attention does not read a cache it is given")
        keys = self.tap.recorded[0]
        dims = [dim for dim in range(keys.ndim) if keys.shape[dim] == self.length]
        if not dims:
            return self._fall_back("its keys have no sequence dimension")
        self.dim = keys.ndim - 2 if keys.ndim - 2 in dims else dims[0]
        self.keys_values = tuple(tensor.detach() for tensor in self.tap.recorded)
        return True

    def _fall_back(self, why: str) -> bool:
        """Log (once per family) that this block keeps whole-sequence products; False."""
        if self.family not in _FALLBACK_LOGGED:
            _FALLBACK_LOGGED.add(self.family)
            log.info("%s: whole-sequence Jacobian products (%s)", self.family, why)
        return False

    def _output(
        self,
        inputs: torch.Tensor,
        rows: slice,
        keys_end: int,
        prefix: tuple[torch.Tensor, torch.Tensor] | None,
        dim: int = -2,
        own: list[tuple[torch.Tensor, torch.Tensor]] | None = None,
    ) -> torch.Tensor:
        """F(X)_rows: the block (and final norm where it includes it) on ``inputs`` (1, n,
        d), the tokens ``rows`` of the stream, after ``prefix``'s keys and values (the
        token's own appended to ``own`` as the attention computes them); the tap it used is
        left in ``self.tap``."""
        self.tap = _KeyValueTap(prefix, dim, own)
        named = {
            name: _rows(value, self.length, rows, keys_end, mask="mask" in name)
            for name, value in self.named.items()
        }
        stream_name = next(iter(self.named))
        named[stream_name], named[self.cache] = inputs, self.tap
        output = first_output(self.call.block(**named))
        return output if self.call.final_norm is None else self.call.final_norm(output)

    def at(self, output_token: int, context: bool) -> LocalLinearisation | None:
        """f(X)_t for t = ``output_token`` as a function of x_t (and of X_{<t} when
        ``context``), or None where the re-run does not reproduce the block. Without
        context, the earlier tokens' keys and values are kept apart from the token's own
        (``layerlaws.coupling.split_attention``) where that reproduces the block too."""
        if not self.supported:
            return None
        split = self.split and not context and output_token > 0
        found = self._rerun(output_token, context, split)
        if split and found is None and self.supported:
            self.split = False
            log.info("%s: attention over the earlier keys as one", self.family)
            found = self._rerun(output_token, context, split=False)
        if found is None:
            return None
        query, earlier, output = found
        branch = output - query.to(output.device)
        return LocalLinearisation(branch, output_token, query, earlier, self.chunk)

    def _rerun(
        self, token: int, context: bool, split: bool
    ) -> tuple[torch.Tensor, torch.Tensor | None, torch.Tensor] | None:
        """x_t, X_{<t} (with context) and f(X)_t of the re-run of token t, checked against
        the whole-sequence block; None where it fails or differs (with ``split``, only
        the split is given up; without, the block falls back, logged)."""
        earlier, prefix = None, None
        if token > 0:
            prefix = tuple(tensor.narrow(self.dim, 0, token) for tensor in self.keys_values)
        try:
            with torch.enable_grad():
                query = self.stream[token][None, None].detach().clone().requires_grad_(True)
                if context and token > 0:
                    earlier = self.stream[None, :token].detach().clone().requires_grad_(True)
                    self._output(earlier, slice(0, token), token, None, self.dim)
                    prefix = self.tap.recorded
                rows = slice(token, token + 1)
                if split:
                    with split_keys(self.call.block, prefix) as own:
                        output = self._output(query, rows, token + 1, prefix, self.dim, own)
                else:
                    output = self._output(query, rows, token + 1, prefix, self.dim)
        except Exception as error:  # a family whose block arguments are cut otherwise
            if not split:
                self.supported = self._fall_back(f"its re-run of token {token} fails: {error!r}")
            return None
        if not _close(output, self.reference[:, token : token + 1], self.terms):
            if not split:
                self.supported = self._fall_back(f"its re-run of token {token} differs")
            return None
        return query, earlier, output


ROUNDING_STAGES = 8
"""Rounding stages of a block's output in series: the norm, the query, key and value
projections, the scores, the softmax, the weighted values, the output projection, the
MLP's two products (its norms and activations rounded alike)."""


def rounding_bound(dtype: torch.dtype, terms: int) -> float:
    """How far apart, relative to the largest entry, two evaluations of one block's output
    in ``dtype`` may lie that differ only in the order of their sums' terms (the whole
    sequence against one token's re-run: matrix products of other shapes, a softmax over
    t + 1 keys instead of T, split in two by ``split_attention``), the longest sum having
    ``terms`` terms: 2 S (ε + √terms ε_sum), S = ROUNDING_STAGES. At each stage the two
    evaluations round their outputs up to ε apart (u = ε/2 each) and a sum of n terms
    about √n ε_sum apart (Higham & Mary, 2019: with high probability the rounding error
    of a sum grows like √n u, not n u); the factor 2 allows for what later stages
    amplify (a norm rescales by 1/rms). ε is the dtype's; ε_sum too, but float32's for
    16-bit dtypes, whose products accumulate in float32. Float64, terms = 64: 144 ε =
    3e-14; float32, terms = 28,672: 3e-4; bfloat16: 0.13."""
    eps = torch.finfo(dtype).eps
    eps_sum = min(eps, torch.finfo(torch.float32).eps)
    return 2 * ROUNDING_STAGES * (eps + terms**0.5 * eps_sum)


def _close(found: torch.Tensor, expected: torch.Tensor, terms: int) -> bool:
    """Whether ``found`` equals ``expected`` to ``rounding_bound`` of their dtype and a
    longest sum of ``terms`` terms, relative to the largest entry of ``expected``."""
    tolerance = rounding_bound(expected.dtype, terms)
    scale = expected.abs().max().clamp_min(torch.finfo(expected.dtype).tiny)
    return bool(((found - expected).abs().max() <= tolerance * scale).item())


class LocalLinearisation:
    """f(X)_t (1, 1, d), t = ``token``, of one block linearised at the token-local graph
    ``TokenLocalBlock`` builds, whose inputs are ``query`` x_t (1, 1, d) and, with
    context, ``earlier`` X_{<t} (1, t, d). Products with J_{t1 t} pull back to ``query``
    alone for t1 = t, to ``earlier`` (read at row t1) for t1 < t."""

    def __init__(
        self,
        outputs: torch.Tensor,
        token: int,
        query: torch.Tensor,
        earlier: torch.Tensor | None,
        chunk: int,
    ) -> None:
        self.outputs, self.token, self.chunk = outputs, token, chunk
        self.query, self.earlier = query, earlier
        self.width, self.device = outputs.shape[-1], outputs.device
        self._pullbacks: dict[int, tuple[torch.Tensor, ...]] = {}

    def _input(self, input_token: int) -> tuple[torch.Tensor, int]:
        """The graph input that holds ``input_token``, and its row there."""
        if input_token == self.token:
            return self.query, 0
        if self.earlier is None or not 0 <= input_token < self.token:
            raise ValueError(f"no input token {input_token} in the graph of token {self.token}")
        return self.earlier, input_token

    def pull(self, input_token: int, cotangents: torch.Tensor) -> torch.Tensor:
        """Jᵀ u for each cotangent u (n, d) at the output token: (n, d), read at
        ``input_token``."""
        inputs, row = self._input(input_token)
        return batched_gradients(self.outputs, inputs, 0, row, cotangents, self.chunk)

    def push(self, input_token: int, tangents: torch.Tensor) -> torch.Tensor:
        """J v for each tangent v (n, d) at ``input_token``: (n, d) at the output token,
        by double backward (``layerlaws.coupling.operators``)."""
        inputs, row = self._input(input_token)
        if id(inputs) not in self._pullbacks:
            self._pullbacks[id(inputs)] = pullback_graph(self.outputs, inputs)
        pullback, cotangent = self._pullbacks[id(inputs)]
        return batched_gradients(pullback, cotangent, row, 0, tangents, self.chunk)

    def rows(self, input_tokens: Sequence[int]) -> torch.Tensor:
        """J_{t1 t} formed for each t1 of ``input_tokens``: (n, d, d), [k, i, j] =
        ∂f(X)_{t, i} / ∂x_{t1, j}, from d VJPs through the graph inputs needed at once:
        x_t alone when t is the only input token, else X_{<t} and x_t (rows 0..t)."""
        width = self.outputs.shape[-1]
        identity = torch.eye(width, dtype=self.outputs.dtype, device=self.outputs.device)
        if all(token == self.token for token in input_tokens):
            inputs, first = [self.query], self.token
        else:
            for token in input_tokens:
                self._input(token)  # an input token this graph holds
            inputs, first = [self.earlier, self.query], 0
        pulled = batched_gradients(self.outputs, inputs, 0, None, identity, self.chunk)
        return torch.stack([pulled[:, token - first] for token in input_tokens])
