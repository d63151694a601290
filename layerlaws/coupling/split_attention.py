"""Attention for a token-local re-run whose earlier tokens' keys and values are constants
(``layerlaws.coupling.local``, ``context=False``: the depth kind and the ``self`` token
kind).

A re-run of token t attends over t + 1 keys: the earlier tokens' (a constant prefix) and
its own (in the graph). transformers' eager attention concatenates them first, so every
Jacobian product pulls a gradient back to all t + 1 keys and values of every head, then
throws all but the last away: memory traffic of t + 1 rows per product where one row is
needed. Here the scores against the prefix and against the token's own key are taken
apart and joined only before the softmax, the output is the prefix's values weighted plus
the token's own, so autograd reaches the prefix nowhere. The operations are eager
attention's (scores scaled, soft-capped where the family does, masked, a softmax in
float32, the values weighted) on the same numbers; only the sums over keys are split in
two. A family whose attention takes anything else (sinks, dropout in training, another
key layout) gets its own eager attention; a family whose eager attention is not
transformers' common one (``splittable``) is not split at all; and the caller checks every
re-run's output against the whole-sequence block's.

It is registered with transformers' ``AttentionInterface`` under ``NAME`` and chosen, for
the duration of one re-run, by ``split_keys``.
"""

from __future__ import annotations

import inspect
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from functools import cache
from typing import Any

import torch

NAME = "layerlaws_split_keys"
HARMLESS = frozenset({"position_ids", "sliding_window", "use_cache", "cache_position"})
"""Keyword arguments of an attention call that the split leaves to the mask (or that do
nothing here)."""
_SPLIT: ContextVar[tuple[tuple[torch.Tensor, torch.Tensor], list] | None] = ContextVar(
    "layerlaws_split_keys", default=None
)
"""While a re-run is under way: the constant prefix's keys and values, (B, H_kv, P, d_head)
each, and the list the cache stand-in appends the token's own keys and values to."""


def _eager_modules(block: torch.nn.Module) -> list[torch.nn.Module]:
    """The modules of ``block`` whose config names the eager attention implementation."""
    return [
        module
        for module in block.modules()
        if getattr(getattr(module, "config", None), "_attn_implementation", None) == "eager"
    ]


@contextmanager
def split_keys(
    block: torch.nn.Module, prefix: tuple[torch.Tensor, torch.Tensor]
) -> Iterator[list[tuple[torch.Tensor, torch.Tensor]]]:
    """Within the block: attention through ``split_attention`` for every config of
    ``block``'s modules whose implementation is eager, with ``prefix`` (keys, values) as
    the constant prefix. Yields the list to which the cache stand-in appends the token's
    own keys and values as its attention computes them."""
    _register()
    configs = {id(module.config): module.config for module in _eager_modules(block)}
    own: list[tuple[torch.Tensor, torch.Tensor]] = []
    token = _SPLIT.set((prefix, own))
    try:
        for config in configs.values():
            config._attn_implementation = NAME
        yield own
    finally:
        for config in configs.values():
            config._attn_implementation = "eager"
        _SPLIT.reset(token)


STANDARD = ("* scaling", "softmax(attn_weights, dim=-1, dtype=torch.float32).to(query.dtype)")
"""What the eager attention of a family this split reproduces reads like (transformers'
common ``eager_attention_forward``: scores scaled by ``scaling``, a float32 softmax)."""


@cache
def _standard(module_name: str) -> bool:
    """Whether the modeling file ``module_name`` dispatches attention through
    ``AttentionInterface`` and its eager attention is the common one (``STANDARD``)."""
    family = sys.modules.get(module_name)
    eager = getattr(family, "eager_attention_forward", None)
    if eager is None:
        return False
    try:
        source, eager_source = inspect.getsource(family), inspect.getsource(eager)
    except (OSError, TypeError):
        return False
    return "get_interface(" in source and all(line in eager_source for line in STANDARD)


def splittable(block: torch.nn.Module) -> bool:
    """Whether every attention of ``block`` is one ``split_attention`` reproduces."""
    families = {type(module).__module__ for module in _eager_modules(block)}
    return bool(families) and all(_standard(name) for name in families)


@cache
def _register() -> None:
    """Register ``split_attention`` with transformers under ``NAME`` (once)."""
    from transformers import AttentionInterface

    AttentionInterface.register(NAME, split_attention)


def _repeated(states: torch.Tensor, groups: int) -> torch.Tensor:
    """(B, H_kv, S, d) → (B, H_kv·groups, S, d), each key-value head repeated for its
    group of query heads (transformers' ``repeat_kv``)."""
    if groups == 1:
        return states
    batch, heads, length, width = states.shape
    expanded = states[:, :, None].expand(batch, heads, groups, length, width)
    return expanded.reshape(batch, heads * groups, length, width)


def split_attention(
    module: torch.nn.Module,
    query: torch.Tensor,
    key: torch.Tensor,
    value: torch.Tensor,
    attention_mask: torch.Tensor | None,
    scaling: float | None = None,
    dropout: float = 0.0,
    softcap: float | None = None,
    **kwargs: Any,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Eager attention with the keys and values split into the constant prefix and the
    token's own (module docstring): query (B, H, n, d), key and value (B, H_kv, P + n, d)
    as the cache stand-in returned them; (output (B, n, H, d), weights (B, H, n, P + n))."""
    state = _SPLIT.get()
    others = {name for name, given in kwargs.items() if given is not None}
    if state is None or not state[1] or others - HARMLESS or (dropout and module.training):
        return _eager(module)(
            module,
            query,
            key,
            value,
            attention_mask,
            scaling=scaling,
            dropout=dropout,
            **({} if softcap is None else {"softcap": softcap}),
            **kwargs,
        )
    (prefix_keys, prefix_values), (own_keys, own_values) = state[0], state[1][-1]
    if key.ndim != 4 or prefix_keys.shape[2] + own_keys.shape[2] != key.shape[2]:
        raise ValueError("the keys are not the prefix's followed by the token's own")
    scaling = query.shape[-1] ** -0.5 if scaling is None else scaling
    groups = query.shape[1] // key.shape[1]
    scores = torch.cat(
        [
            torch.matmul(query, _repeated(keys, groups).transpose(2, 3))
            for keys in (prefix_keys, own_keys)
        ],
        dim=-1,
    )
    scores = scores * scaling
    if softcap is not None:
        scores = torch.tanh(scores / softcap) * softcap
    if attention_mask is not None:
        scores = scores + attention_mask
    weights = torch.nn.functional.softmax(scores, dim=-1, dtype=torch.float32).to(query.dtype)
    prefix_length = prefix_keys.shape[2]
    output = torch.matmul(
        weights[..., :prefix_length], _repeated(prefix_values, groups)
    ) + torch.matmul(weights[..., prefix_length:], _repeated(own_values, groups))
    return output.transpose(1, 2).contiguous(), weights


def _eager(module: torch.nn.Module) -> Any:
    """The eager attention function of ``module``'s family (its modeling file's)."""
    family = sys.modules[type(module).__module__]
    eager = getattr(family, "eager_attention_forward", None)
    if eager is None:
        raise ValueError(f"{type(module).__name__} has no eager_attention_forward")
    return eager
