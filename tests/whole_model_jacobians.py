"""Block Jacobians taken through the whole model, as references for the coupling stage.

The step of block l maps the residual stream X^{l-1} (T, d) entering it to the stream
entering block l + 1, or, for the last block, to what the model's head reads (after the
final norm: Aubry et al., Eq. 7). Its reference Jacobian is taken by
``torch.autograd.functional.jacobian`` through the model's own forward pass
(``model(input_ids=..., use_cache=False)``, no cache, so every token is recomputed from the
substituted stream): a forward pre-hook on block l replaces the stream it receives by the
tensor being differentiated, and a hook records the stream at the other end. Nothing here
uses the library's block tracing or architecture table: the block list is the model's one
module list of ``num_hidden_layers`` modules; the head is transformers'
``get_output_embeddings()`` (decoders) or, for a masked-LM encoder, whose head transforms
the stream before W_U, the model's one child besides its base model.

``pipeline_step_jacobian`` is the side under test: the coupling stage's path
(``trace_blocks``, then one output token at a time its Jacobians formed by d VJPs, as
``measure_prompt`` does: through the whole sequence, or through the block re-run for that
token alone, ``layerlaws.coupling.local``), plus the identity, since the stage keeps the
residual branch's Jacobian J = ∂F/∂X − I.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch

from layerlaws.coupling.jacobians import jacobian_rows
from layerlaws.coupling.local import TokenLocalBlock
from layerlaws.models.blocks import trace_blocks

ENCODER_FAMILIES = {"bert", "roberta"}
"""Masked-LM encoders (bidirectional: a token's output depends on later tokens too)."""


def scanned_blocks(model: torch.nn.Module) -> torch.nn.ModuleList:
    """The model's block list, found without the architecture table."""
    found = [
        module
        for module in model.modules()
        if isinstance(module, torch.nn.ModuleList) and len(module) == model.config.num_hidden_layers
    ]
    assert len(found) == 1, f"{len(found)} module lists of num_hidden_layers entries"
    return found[0]


def head_module(model: torch.nn.Module) -> torch.nn.Module:
    """The module whose input is the last layer: the LM head, or an encoder's masked-LM
    head (which transforms the stream before W_U)."""
    if model.config.model_type not in ENCODER_FAMILIES:
        return model.get_output_embeddings()
    heads = [child for child in model.children() if child is not model.base_model]
    assert len(heads) == 1, f"{len(heads)} children besides the base model"
    return heads[0]


def _stream_argument(args: tuple, kwargs: dict) -> torch.Tensor:
    """The residual stream a block is called with: first positional, or ``hidden_states``."""
    return args[0] if args else kwargs["hidden_states"]


def whole_model_step(model: Any, input_ids: torch.Tensor, block: int) -> Callable:
    """The map X (T, d) ↦ the stream entering block ``block`` + 1 (T, d), or the head's
    input after the last block, evaluated by a whole forward pass of ``input_ids`` (1, T)
    with X substituted for what block ``block`` (0-based) receives."""
    blocks = scanned_blocks(model)

    def step(stream: torch.Tensor) -> torch.Tensor:
        seen: dict[str, torch.Tensor] = {}

        def substitute(_block, args, kwargs):
            if args:
                return (stream[None], *args[1:]), kwargs
            return args, {**kwargs, "hidden_states": stream[None]}

        def record(value: torch.Tensor) -> None:
            seen["next"] = value[0]

        hooks = [blocks[block].register_forward_pre_hook(substitute, with_kwargs=True)]
        if block + 1 < len(blocks):
            hooks.append(
                blocks[block + 1].register_forward_pre_hook(
                    lambda _b, args, kwargs: record(_stream_argument(args, kwargs)),
                    with_kwargs=True,
                )
            )
        else:
            hooks.append(
                head_module(model).register_forward_pre_hook(lambda _h, args: record(args[0]))
            )
        try:
            model(input_ids=input_ids, use_cache=False)
        finally:
            for hook in hooks:
                hook.remove()
        return seen["next"]

    return step


def reference_step_jacobian(
    model: Any, input_ids: torch.Tensor, block: int, stream: torch.Tensor
) -> torch.Tensor:
    """∂(next stream)_{t2, i} / ∂X_{t1, j} at X = ``stream`` (T, d), through the whole
    model; (T, d, T, d) indexed [t2, i, t1, j]."""
    return torch.autograd.functional.jacobian(
        whole_model_step(model, input_ids, block), stream.detach().clone(), vectorize=True
    )


def pipeline_step_jacobian(
    model: Any, input_ids: torch.Tensor, block: int, vjp_chunk: int = 12, local: bool = False
) -> tuple[torch.Tensor | None, torch.Tensor]:
    """The coupling stage's Jacobian of block ``block`` (0-based; the last one including
    the final norm) plus the identity, (T, d, T, d) indexed [t2, i, t1, j], and the traced
    streams x^0 … x^L (L + 1, T, d); with ``local``, token-local products (None for the
    Jacobian where the family falls back to whole-sequence ones)."""
    calls, streams = trace_blocks(model, input_ids)
    stream = streams[block]
    length, width = stream.shape
    if local:
        token_local = TokenLocalBlock(calls[block], stream, vjp_chunk)
        graphs = [token_local.at(output, context=True) for output in range(length)]
        if any(graph is None for graph in graphs):
            return None, streams
        earlier = [graph.rows(list(range(output + 1))) for output, graph in enumerate(graphs)]
        zeros = torch.zeros(length, width, width, dtype=earlier[0].dtype, device=stream.device)
        rows = torch.stack([torch.cat([found, zeros[len(found) :]]) for found in earlier])
    else:
        rows = torch.stack(
            [
                jacobian_rows(calls[block].branch, stream, output, range(length), vjp_chunk)
                for output in range(length)
            ]
        )  # [t2, t1, i, j]
    identity = torch.eye(length * width, dtype=rows.dtype, device=rows.device)
    identity = identity.reshape(length, width, length, width)
    return rows.permute(0, 2, 1, 3) + identity, streams


def pipeline_self_jacobians(
    model: Any, input_ids: torch.Tensor, block: int
) -> tuple[torch.Tensor | None, list[bool]]:
    """The stage's J_tt + I of block ``block`` for every token t, (T, d, d) [t, i, j], from
    token-local re-runs without context (the earlier tokens' keys and values constants,
    as the depth and ``self`` kinds take them; None where the family falls back), and
    whether each re-run of a token after the first split its attention
    (``layerlaws.coupling.split_attention``; the first has no earlier keys)."""
    calls, streams = trace_blocks(model, input_ids)
    stream = streams[block]
    token_local = TokenLocalBlock(calls[block], stream)
    found, split = [], []
    for output in range(stream.shape[0]):
        graph = token_local.at(output, context=False)
        if graph is None:
            return None, split
        found.append(graph.rows([output])[0])
        split.append(token_local.split)
    identity = torch.eye(stream.shape[1], dtype=found[0].dtype)
    return torch.stack(found) + identity, split


def relative_difference(jacobian: torch.Tensor, reference: torch.Tensor) -> float:
    """‖J − J_ref‖_max / ‖J_ref‖_max."""
    return ((jacobian - reference).abs().max() / reference.abs().max()).item()


def assert_blocks_jacobians(model: Any, input_ids: torch.Tensor, bound: float) -> None:
    """Every block's Jacobian by both product paths of the coupling stage (token-local,
    which must not fall back, and whole-sequence) within ``bound`` of the whole-model
    reference (``relative_difference``), at ``input_ids`` on the model's device."""
    for block in range(len(scanned_blocks(model))):
        whole, streams = pipeline_step_jacobian(model, input_ids, block)
        local, _ = pipeline_step_jacobian(model, input_ids, block, local=True)
        assert local is not None, f"block {block} fell back to whole-sequence products"
        reference = reference_step_jacobian(model, input_ids, block, streams[block])
        assert torch.isfinite(reference).all() and reference.abs().max() > 0
        for path, found in (("whole-sequence", whole), ("token-local", local)):
            error = relative_difference(found, reference)
            assert error <= bound, f"block {block}, {path}: {error:.1e}"
