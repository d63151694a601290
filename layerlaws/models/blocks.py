"""Residual blocks of a model and the stream between them (Aubry et al., §2).

Hooks at the places the architecture table names give the residual stream of any family,
whatever its ``output_hidden_states`` convention: ``layer_states`` for batches (hidden-state
extraction), ``trace_blocks`` for one sequence together with each block's call, so that a
block's residual branch x^l = x^{l-1} + f^l(X^{l-1}) can be re-run alone as a function of
the stream (Jacobians). The branch is built the same way for every family: the block
called with the other arguments it received, its first output minus its input. As in
Aubry et al. (Eq. 7), the last block may include the model's final norm:
F^L(X) = LN(X + f(X)), so that x^L is what the LM head reads.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

import torch

from layerlaws.models.architectures import (
    BLOCK_INPUTS,
    LayerChoice,
    architecture_of,
    blocks_of,
    head_input_of,
    layer_count,
    module_at,
    require_single_stack,
)
from layerlaws.models.precision import keep_float64


def first_output(output: Any) -> torch.Tensor:
    """The hidden states among a block's outputs (a tensor, or a tuple or list that starts
    with it, as GPT-1's blocks return)."""
    return output[0] if isinstance(output, tuple | list) else output


def _split_call(
    args: tuple[Any, ...], kwargs: dict[str, Any]
) -> tuple[torch.Tensor, tuple[Any, ...], dict[str, Any]]:
    """A block's call as (the residual stream it receives, its other positional arguments,
    its other keyword arguments): the stream is the first positional argument, or the
    keyword ``hidden_states``."""
    if args:
        return args[0], args[1:], kwargs
    rest = dict(kwargs)
    return rest.pop("hidden_states"), (), rest


def layer_points(
    model: Any, choice: LayerChoice = BLOCK_INPUTS
) -> list[tuple[torch.nn.Module, bool]]:
    """Where layers 0..L of ``model`` are taken under ``choice``, in order: (module,
    whether the layer is its output; otherwise its input, the residual stream it is called
    with). For one stack: the input of each block, then of the LM head (an encoder's
    masked-LM head); an encoder–decoder's (``layerlaws.models.architectures``): the input
    of each encoder block, the encoder norm's output, the input of decoder blocks 2..L_d
    and the decoder's final norm's output, or one stack's (the input of each of its
    blocks, then its final norm's output)."""
    architecture = architecture_of(model.config)
    layer_count(model, choice)  # a stack of a model of one is refused
    if architecture.decoder_blocks is None:
        blocks = blocks_of(model)
        if choice.hidden_states and architecture.hidden_states_from_first_block:
            # transformers' output_hidden_states: each block's output, the last also
            # before the final norm (He & Su's released code).
            inputs = [*blocks[1:], module_at(model, architecture.final_norm)]
        else:
            inputs = blocks
        return [(module, False) for module in [*inputs, head_input_of(model)]]
    encoder = [
        *[(block, False) for block in module_at(model, architecture.blocks)],
        (module_at(model, architecture.encoder_norm), True),
    ]
    decoder = [
        *[(block, False) for block in module_at(model, architecture.decoder_blocks)],
        (module_at(model, architecture.final_norm), True),
    ]
    if choice.stack == "encoder":
        return encoder
    if choice.stack == "decoder":
        return decoder
    return encoder + decoder[1:]  # the first decoder block receives no layer


@contextmanager
def layer_states(
    model: Any, record: Callable[[int, torch.Tensor], None], choice: LayerChoice = BLOCK_INPUTS
) -> Iterator[None]:
    """While active, every forward pass calls ``record(layer, state)`` for layers 0..L in
    order (``layer_points``): ``state`` (batch, tokens, hidden_size) is what block ``layer``
    + 1 receives for layer < L, and what the LM head (an encoder's masked-LM head) receives
    for layer L; under ``choice`` one stack's layers of an encoder–decoder, or
    transformers' numbering of Mamba's and RWKV's (``LayerChoice``).

    An encoder–decoder's layers are those of ``layerlaws.models.architectures``: what its
    encoder blocks receive, the encoder norm's output (layer L_e), what decoder blocks
    2..L_d receive and the decoder's final norm's output (layer L); the encoder's states
    are (batch, encoder tokens, hidden_size)."""

    def before(layer: int) -> Callable[..., None]:
        return lambda _module, args, kwargs: record(layer, _split_call(args, kwargs)[0])

    def after(layer: int) -> Callable[..., None]:
        return lambda _module, _args, output: record(layer, output)

    hooks = [
        module.register_forward_hook(after(layer))
        if output
        else module.register_forward_pre_hook(before(layer), with_kwargs=True)
        for layer, (module, output) in enumerate(layer_points(model, choice))
    ]
    try:
        yield
    finally:
        for hook in hooks:
            hook.remove()


@dataclass
class BlockCall:
    """One block with the arguments it was called with, apart from the residual stream."""

    block: torch.nn.Module
    args: tuple[Any, ...]
    kwargs: dict[str, Any]
    final_norm: torch.nn.Module | None = None
    """The model's final norm when this is the last block and it includes it."""

    def output(self, stream: torch.Tensor) -> torch.Tensor:
        """F^l(X): the block's output (after the final norm where it includes it)."""
        output = first_output(self.block(stream, *self.args, **self.kwargs))
        return output if self.final_norm is None else self.final_norm(output)

    def branch(self, stream: torch.Tensor) -> torch.Tensor:
        """f^l(X) = F^l(X) − X: the block's output minus its input; ``stream`` is (1, T, d),
        on any device (a model spread over GPUs keeps each block on its own)."""
        output = self.output(stream)
        return output - stream.to(output.device)


def final_norm_of(model: Any) -> torch.nn.Module | None:
    """The norm between the last block and the LM head, or None (post-LN models)."""
    path = architecture_of(model.config).final_norm
    return None if path is None else module_at(model, path)


@torch.no_grad()
def trace_blocks(
    model: Any, input_ids: torch.Tensor, final_norm: bool = True
) -> tuple[list[BlockCall], torch.Tensor]:
    """Run one sequence ``input_ids`` (1, T) and return every block's call and the
    residual stream x^0 … x^L, shape (L + 1, T, d): x^{l-1} the input of block l, x^L the
    output of the last block, after the model's final norm when ``final_norm`` (Aubry et
    al., Eq. 7: the last block includes it) and the model has one, before it otherwise.
    A float64 model computes in float64 throughout from then on, its calls of single
    blocks too (``layerlaws.models.precision.keep_float64``). A LayerlawsError for an
    encoder–decoder, whose two stacks are no one stream."""
    require_single_stack(
        model.config.model_type,
        "coupling (Jacobians of blocks along one residual stream)",
        "measure it in equi-learning runs only",
    )
    keep_float64(model)
    blocks = blocks_of(model)
    norm = final_norm_of(model) if final_norm else None
    calls: dict[int, BlockCall] = {}
    streams: list[torch.Tensor] = []

    def before(block: torch.nn.Module, args: tuple, kwargs: dict) -> None:
        stream, other_args, other_kwargs = _split_call(args, kwargs)
        calls[id(block)] = BlockCall(block, other_args, other_kwargs)
        streams.append(stream[0].detach().clone())

    def after(_block: torch.nn.Module, _args: tuple, output: Any) -> None:
        last = first_output(output)
        streams.append((last if norm is None else norm(last))[0].detach().clone())

    hooks = [block.register_forward_pre_hook(before, with_kwargs=True) for block in blocks]
    hooks.append(blocks[-1].register_forward_hook(after))
    try:
        model(input_ids=input_ids, use_cache=False)
    finally:
        for hook in hooks:
            hook.remove()
    calls[id(blocks[-1])].final_norm = norm
    return [calls[id(block)] for block in blocks], torch.stack(streams)
