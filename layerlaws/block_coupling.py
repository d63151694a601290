"""Block coupling and trajectories of one prompt (SCIENCE.md §4, paper 004).

For a prompt of T tokens and a model of L blocks:
- depth: the last token's self-Jacobian J^l_{TT} at every layer; M[l, l′] = m̃ of J^l
  coupled with the singular vectors of J^{l′};
- tokens, at chosen layers: self-Jacobians J^l_{tt} for every t (``self``), context
  Jacobians with the output fixed at the last token J^l_{t,T} (``fixed_output``) and with
  the input fixed at the first token J^l_{1,t} (``fixed_input``); M[t, t′] likewise.
  One VJP per output row gives every input token at once, so each output token's rows
  are computed once and sliced for all three kinds;
- trajectories: line-shape score, its sliding windows and expodistance of every token.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import polars as pl
import torch

from layerlaws.blocks import trace_blocks
from layerlaws.coupling import miscoupling_matrix
from layerlaws.errors import LayerlawsError
from layerlaws.jacobians import jacobian_rows, top_singular
from layerlaws.trajectories import expodistance, line_shape_score, windowed_line_shape

log = logging.getLogger(__name__)

TOKEN_KINDS = ("self", "fixed_output", "fixed_input")


@dataclass
class PromptMeasurement:
    """Everything measured on one prompt (rows are plain dicts for polars)."""

    depth: list[dict[str, Any]] = field(default_factory=list)
    tokens: list[dict[str, Any]] = field(default_factory=list)
    trajectories: list[dict[str, Any]] = field(default_factory=list)
    windows: list[dict[str, Any]] = field(default_factory=list)
    factors: dict[str, np.ndarray] = field(default_factory=dict)
    streams: np.ndarray | None = None


def measure_prompt(
    model: Any,
    input_ids: torch.Tensor,
    token_layers: Sequence[int],
    ks: Sequence[int],
    svd: str = "full",
    vjp_chunk: int = 64,
    lss_window: int = 11,
) -> PromptMeasurement:
    """Measure one prompt ``input_ids`` (1, T). Layers are numbered 1..L (block l maps
    x^{l-1} to x^l); tokens 0..T−1."""
    calls, streams = trace_blocks(model, input_ids)
    n_layers, length = len(calls), streams.shape[1]
    last, k_max = length - 1, max(ks)
    result = PromptMeasurement(streams=streams.float().cpu().numpy())

    depth = [
        jacobian_rows(call.branch, stream, last, [last], vjp_chunk)[0]
        for call, stream in zip(calls, streams, strict=False)
    ]
    depth_factors = [top_singular(j, k_max, svd) for j in depth]
    for k in ks:
        matrix = miscoupling_matrix(depth, depth_factors, k)
        result.depth += [
            {"layer_a": a + 1, "layer_b": b + 1, "k": k, "miscoupling": float(matrix[a, b])}
            for a in range(n_layers)
            for b in range(n_layers)
        ]
    result.factors = {
        "u": torch.stack([u for u, _, _ in depth_factors]).cpu().numpy(),
        "s": torch.stack([s for _, s, _ in depth_factors]).cpu().numpy(),
        "v": torch.stack([v for _, _, v in depth_factors]).cpu().numpy(),
    }

    for layer in token_layers:
        call, stream = calls[layer - 1], streams[layer - 1]
        kinds: dict[str, list[torch.Tensor]] = {kind: [] for kind in TOKEN_KINDS}
        for output in range(length):
            wanted = list(range(length)) if output == last else sorted({0, output})
            rows = jacobian_rows(call.branch, stream, output, wanted, vjp_chunk)
            kinds["self"].append(rows[wanted.index(output)])
            kinds["fixed_input"].append(rows[0])
            if output == last:
                kinds["fixed_output"] = list(rows)
        for kind, jacobians in kinds.items():
            factors = [top_singular(j, k_max, svd) for j in jacobians]
            for k in ks:
                matrix = miscoupling_matrix(jacobians, factors, k)
                result.tokens += [
                    {
                        "layer": layer,
                        "kind": kind,
                        "token_a": a,
                        "token_b": b,
                        "k": k,
                        "miscoupling": float(matrix[a, b]),
                    }
                    for a in range(length)
                    for b in range(length)
                ]

    for token in range(length):
        trajectory = result.streams[:, token]
        result.trajectories.append(
            {
                "token": token,
                "lss": line_shape_score(trajectory),
                "expodistance": expodistance(trajectory),
            }
        )
        result.windows += [
            {"token": token, "layer": layer, "lss": float(value)}
            for layer, value in enumerate(windowed_line_shape(trajectory, lss_window), start=1)
        ]
    return result


def chosen_layers(configured: Sequence[int], num_layers: int) -> list[int]:
    """The token-wise coupling layers: as configured, or the middle layer when none is."""
    layers = list(configured) or [max(1, num_layers // 2)]
    if max(layers) > num_layers:
        raise LayerlawsError(
            f"coupling.token_layers {layers} name a layer beyond the model's {num_layers}"
        )
    return layers


@dataclass
class PromptSetMeasurement:
    """The tables and arrays of a prompt set measured under several weights."""

    depth: pl.DataFrame
    """weights, prompt (index or ``mean``), layer_a, layer_b, k, miscoupling."""
    tokens: pl.DataFrame
    """weights, prompt, layer, kind, token_a, token_b, k, miscoupling."""
    trajectories: pl.DataFrame
    """weights, prompt, token, lss, expodistance, text."""
    windows: pl.DataFrame
    """weights, prompt, token, layer, lss."""
    factors: dict[str, np.ndarray]
    """``<weights>/<prompt>/{u,s,v}``: top-K factors of the last-token Jacobians."""
    streams: dict[str, np.ndarray]
    """``<weights>/<prompt>``: raw residual stream (L + 1, T, d)."""


def measure_prompt_set(
    models: Mapping[str, Any],
    prompts: Sequence[Sequence[int]],
    labels: Sequence[Sequence[str]],
    token_layers: Sequence[int],
    ks: Sequence[int],
    svd: str,
    vjp_chunk: int,
    lss_window: int,
    device: str,
) -> PromptSetMeasurement:
    """``measure_prompt`` for every prompt under every weights (e.g. ``trained`` and
    ``random``); depth rows are also averaged over the prompts (prompt ``mean``)."""
    rows: dict[str, list[dict[str, Any]]] = {
        "depth": [],
        "tokens": [],
        "trajectories": [],
        "windows": [],
    }
    factors, streams = {}, {}
    for weights, model in models.items():
        for index, ids in enumerate(prompts):
            measured = measure_prompt(
                model,
                torch.tensor([list(ids)], device=device),
                token_layers,
                ks,
                svd,
                vjp_chunk,
                lss_window,
            )
            tag = {"weights": weights, "prompt": str(index)}
            for name, table in rows.items():
                table += [tag | row for row in getattr(measured, name)]
            for key, array in measured.factors.items():
                factors[f"{weights}/{index}/{key}"] = array
            streams[f"{weights}/{index}"] = measured.streams
            log.info("%s prompt %d (%d tokens) done", weights, index, len(ids))
    depth = pl.DataFrame(rows["depth"])
    mean = (
        depth.group_by("weights", "layer_a", "layer_b", "k", maintain_order=True)
        .agg(pl.col("miscoupling").mean())
        .with_columns(prompt=pl.lit("mean"))
    )
    trajectories = pl.DataFrame(rows["trajectories"]).with_columns(
        text=pl.struct("prompt", "token").map_elements(
            lambda row: labels[int(row["prompt"])][row["token"]], return_dtype=pl.String
        )
    )
    return PromptSetMeasurement(
        depth=pl.concat([depth, mean.select(depth.columns)]),
        tokens=pl.DataFrame(rows["tokens"]),
        trajectories=trajectories,
        windows=pl.DataFrame(rows["windows"]),
        factors=factors,
        streams=streams,
    )
