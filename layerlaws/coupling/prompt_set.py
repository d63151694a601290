"""A prompt set's coupling under several weights (``trained``, ``random``): every prompt
measured by ``layerlaws.coupling.measurement.measure_prompt``, and the set's tables and
arrays combined from them (Aubry et al., §3).

A prompt set given ``ProgressSaves`` (``layerlaws.core.progress``) saves, between prompts
and at most every ``execution.checkpoint_minutes``, the ``PromptMeasurement`` of every
(weights, prompt) measured so far, with a hash of those weights' names, prompt indices and
token ids. A rerun with the same inputs skips them and ends with the outputs of an
uninterrupted run: every randomised SVD starts its generator from ``svd_seed`` anew, so a
prompt's numbers do not depend on the prompts measured before it.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import polars as pl
import torch

from layerlaws.core.logs import ProgressLog
from layerlaws.core.progress import ProgressSaves, prefix_hash
from layerlaws.coupling.measurement import PromptMeasurement, TokenCoupling, measure_prompt
from layerlaws.coupling.settings import CouplingSettings

log = logging.getLogger(__name__)


@dataclass
class PromptSetMeasurement:
    """The tables and arrays of a prompt set measured under several weights."""

    depth: pl.DataFrame
    """weights, prompt (index or ``mean``), layer_a, layer_b, k, metric, miscoupling (the
    value of that coupling metric, ``layerlaws.coupling.miscoupling``)."""
    singular_values: pl.DataFrame
    """weights, prompt, layer, rank (1..K), singular_value (of the last token's J^l)."""
    tokens: pl.DataFrame
    """weights, prompt, layer_a, layer_b, kind, token_a, token_b, k, metric, miscoupling."""
    trajectories: pl.DataFrame
    """weights, prompt, token, lss, expodistance, equidistance_cv, text."""
    layers: pl.DataFrame
    """weights, prompt, token, layer (0..L), norm, step_length, lss_window (NaN at 0),
    logit_entropy, next_token_loss (nats; NaN at the last token)."""
    factors: dict[str, np.ndarray]
    """``<weights>/<prompt>/{u,s,v}``: top-K factors of the last-token Jacobians."""
    streams: dict[str, np.ndarray]
    """``<weights>/<prompt>``: raw residual stream (L + 1, T, d)."""
    couplings: dict[str, np.ndarray]
    """``depth/<weights>/<prompt>``: A of every depth pair (L, L, K, K), and
    ``depth/<weights>/mean_abs`` their mean |A| over prompts; ``tokens/<weights>/0``: A of
    the ``self`` kind at the first token layer pair, first prompt (T, T, K, K); ``k``: K
    (the smallest of ``ks``); ``token_layers``: that pair (l, l′). float32."""


Measured = dict[tuple[str, int], PromptMeasurement]
"""Prompt measurements by (weights, prompt index)."""


def measure_prompts(
    models: Mapping[str, Any],
    prompts: Sequence[Sequence[int]],
    indices: Sequence[int],
    *,
    token_coupling: TokenCoupling,
    settings: CouplingSettings,
    vjp_chunk: int,
    device: str,
    saves: ProgressSaves | None = None,
    jacobian_prompts: int | None = None,
) -> Measured:
    """``measure_prompt`` for the prompts (token ids) of ``indices`` under every weights
    (e.g. ``trained`` and ``random``) on ``device``; ``svd: auto`` decides for the
    longest of all ``prompts``, so that every shard of a set decides alike. Only the
    prompts before index ``jacobian_prompts`` (all when None) have their Jacobians
    measured, the rest their trajectories. With ``saves`` the prompts measured by an
    earlier run of the same inputs are taken from its last save, and the measurements so
    far are saved after each prompt that leaves some to measure (the caller removes the
    save once its outputs are written)."""
    units = [
        (weights, index, [int(token) for token in prompts[index]])
        for weights in models
        for index in indices
    ]
    longest = max(len(prompt) for prompt in prompts)
    measured = _resumed(saves, units) if saves is not None else []
    report = ProgressLog("coupling", len(units), "prompts", done=len(measured), every=60)
    for number, (weights, index, ids) in enumerate(units[len(measured) :], start=len(measured) + 1):
        measured.append(
            measure_prompt(
                models[weights],
                torch.tensor([ids], device=device),
                token_coupling=token_coupling,
                settings=settings,
                vjp_chunk=vjp_chunk,
                svd_length=longest,
                jacobians=jacobian_prompts is None or index < jacobian_prompts,
            )
        )
        report.update(number, f"last: {weights} prompt {index}, {len(ids)} tokens")
        if saves is not None and number < len(units):
            state = {"units_hash": prefix_hash(units[:number]), "measured": measured}
            saves.save_if_due(state, f"prompt {number} of {len(units)}")
    return {
        (weights, index): result
        for (weights, index, _), result in zip(units, measured, strict=True)
    }


def _resumed(
    saves: ProgressSaves, units: Sequence[tuple[str, int, list[int]]]
) -> list[PromptMeasurement]:
    """The measurements of the first ``units`` (weights, prompt index, token ids) kept by
    the last save; [] when there is none or it holds other prompts (logged)."""
    state = saves.load()
    if state is None:
        return []
    done = len(state["measured"])
    if not saves.prefix_matches(state["units_hash"], units, done, "measured prompts"):
        return []
    log.info("resuming the coupling after %d of %d prompts (weights × prompts)", done, len(units))
    return state["measured"]


def combine(
    measured: Mapping[tuple[str, int], PromptMeasurement],
    weights_names: Sequence[str],
    labels: Sequence[Sequence[str]],
    token_coupling: TokenCoupling,
    settings: CouplingSettings,
) -> PromptSetMeasurement:
    """The tables and arrays of the prompt set from the ``measured`` prompts (keyed by
    weights and prompt index: one job's, or the union of its shards'), in the order of
    ``weights_names`` and of ``labels`` (one per prompt). Depth rows are also averaged
    over the prompts (prompt ``mean``)."""
    rows: dict[str, list[dict[str, Any]]] = {
        name: [] for name in ("depth", "singular_values", "tokens", "trajectories", "layers")
    }
    factors, streams = {}, {}
    couplings: dict[str, np.ndarray] = {
        "k": np.array(min(settings.ks)),
        "token_layers": np.array(token_coupling.layer_pairs[0]),
    }
    for weights in weights_names:
        absolute = []
        for index in range(len(labels)):
            prompt = measured[weights, index]
            tag = {"weights": weights, "prompt": str(index)}
            for name, table in rows.items():
                table += [tag | row for row in getattr(prompt, name)]
            for key, array in prompt.factors.items():
                factors[f"{weights}/{index}/{key}"] = array
            streams[f"{weights}/{index}"] = prompt.streams
            if prompt.depth_couplings is None:
                continue
            couplings[f"depth/{weights}/{index}"] = prompt.depth_couplings
            absolute.append(np.abs(prompt.depth_couplings))
            if index == 0:
                couplings[f"tokens/{weights}/0"] = prompt.token_couplings
        couplings[f"depth/{weights}/mean_abs"] = np.mean(absolute, axis=0, dtype=np.float64).astype(
            np.float32
        )
    depth = pl.DataFrame(rows["depth"])
    mean = (
        depth.group_by("weights", "layer_a", "layer_b", "k", "metric", maintain_order=True)
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
        singular_values=pl.DataFrame(rows["singular_values"]),
        tokens=pl.DataFrame(rows["tokens"]),
        trajectories=trajectories,
        layers=pl.DataFrame(rows["layers"]),
        factors=factors,
        streams=streams,
        couplings=couplings,
    )
