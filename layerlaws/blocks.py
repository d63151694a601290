"""Residual blocks of a model as functions: x^l = x^{l-1} + f^l(X^{l-1}) (SCIENCE.md §4).

A forward pass with a pre-hook on every block records each block's inputs (the residual
stream X^{l-1} and the other arguments, such as rotary position embeddings); the block's
residual branch can then be re-run alone on any stream as a pure function of it.
"""

from __future__ import annotations

from dataclasses import dataclass
from operator import attrgetter
from typing import Any

import torch

from layerlaws.models import architecture_of


def decoder_blocks(model: Any) -> list[torch.nn.Module]:
    """The model's residual blocks, first to last."""
    return list(attrgetter(architecture_of(model.config).blocks)(model))


@dataclass
class BlockCall:
    """One block with the arguments it was called with, apart from the residual stream."""

    block: torch.nn.Module
    args: tuple[Any, ...]
    kwargs: dict[str, Any]

    def branch(self, stream: torch.Tensor) -> torch.Tensor:
        """f^l(X): the block's output minus its input; ``stream`` is (1, T, d)."""
        output = self.block(stream, *self.args, **self.kwargs)
        output = output[0] if isinstance(output, tuple) else output
        return output - stream


@torch.no_grad()
def trace_blocks(model: Any, input_ids: torch.Tensor) -> tuple[list[BlockCall], torch.Tensor]:
    """Run one sequence ``input_ids`` (1, T) and return every block's call and the raw
    residual stream x^0 … x^L, shape (L + 1, T, d): x^0 the input of block 1, x^l the
    output of block l (x^L before the model's final norm)."""
    blocks = decoder_blocks(model)
    calls: dict[int, BlockCall] = {}
    streams: list[torch.Tensor] = []

    def before(block: torch.nn.Module, args: tuple, kwargs: dict) -> None:
        calls[id(block)] = BlockCall(block, args[1:], dict(kwargs))
        streams.append(args[0][0].detach().clone())

    def after(_block: torch.nn.Module, _args: tuple, output: Any) -> None:
        output = output[0] if isinstance(output, tuple) else output
        streams.append(output[0].detach().clone())

    hooks = [block.register_forward_pre_hook(before, with_kwargs=True) for block in blocks]
    hooks.append(blocks[-1].register_forward_hook(after))
    try:
        model(input_ids=input_ids, use_cache=False)
    finally:
        for hook in hooks:
            hook.remove()
    return [calls[id(block)] for block in blocks], torch.stack(streams)
