"""Block coupling and trajectories of one prompt (Aubry et al., §3).

For a prompt of T tokens and a model of L blocks (the last one including the final norm,
Eq. 7, unless ``final_norm`` is off):
- depth: the last token's self-Jacobian J^l_{TT} at every layer; M[l, l′] = m̃ of J^l
  coupled with the singular vectors of J^{l′}, by each chosen metric (the paper's or the
  released code's, ``layerlaws.coupling.miscoupling``); the top-K singular values of each
  J^l;
- tokens, for chosen layer pairs (l, l′) (l = l′ by default): M[t, t′] = m̃ of a Jacobian
  at layer l and token t coupled with the singular vectors of one at layer l′ and token t′
  — self-Jacobians J_{tt} (``self``), context Jacobians with the output token fixed
  J_{t, t2} (``fixed_output``, t ≤ t2) and with the input token fixed J_{t1, t}
  (``fixed_input``, t ≥ t1), as in §3.1. One VJP per output row gives every input token
  at once, so each output token's rows are computed once and sliced for all three kinds;
- under ``svd: matrix_free`` no Jacobian is formed: each is an operator of VJPs and JVPs
  through its block's graph (``layerlaws.coupling.operators``), its factors come from a
  randomised block Krylov SVD and each coupling matrix from products with it; every step
  after (``metric_matrices``) is shared with the formed path;
- coupling matrices: A = U′_Kᵀ J V′_K (§3.1) at the smallest K, of every depth pair and
  of the ``self`` kind at the first token layer pair, for the grids of Figs. 3 and 4;
- trajectories: per token the line-shape score, expodistance and the coefficient of
  variation of the step lengths ‖x^l − x^{l−1}‖ (equidistance, Fig. 23); per token and
  layer the norm, the step length, the centred windowed line-shape score (Fig. 24–25) and
  the logit lens: the entropy of the model's own head applied to x^l and its loss on the
  next token (Fig. 24, row 4; ``layerlaws.models.heads``). Under ``final_norm:
  in_last_block`` x^L has passed the final norm already, so the lens applies only the
  head there and the norm and head at every other layer; under ``excluded`` the norm and
  head at every layer.

A prompt set given ``ProgressSaves`` (``layerlaws.core.progress``) saves, between prompts
and at most every ``execution.checkpoint_minutes``, the ``PromptMeasurement`` of every
(weights, prompt) measured so far, with a hash of those weights' names, prompt indices and
token ids. A rerun with the same inputs skips them and ends with the outputs of an
uninterrupted run: every randomised SVD starts its generator from ``svd_seed`` anew, so a
prompt's numbers do not depend on the prompts measured before it.
"""

from __future__ import annotations

import hashlib
import logging
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

import numpy as np
import polars as pl
import torch

from layerlaws.core.errors import LayerlawsError
from layerlaws.core.progress import ProgressSaves
from layerlaws.coupling.costs import AUTO, MATRIX_FREE, TOKEN_LOCAL, PromptShape
from layerlaws.coupling.jacobians import top_singular
from layerlaws.coupling.layers import layer_pairs as layer_pairs
from layerlaws.coupling.local import TokenLocalBlock
from layerlaws.coupling.miscoupling import OWN_VALUES_FREE, metric_matrices, needs_swapped
from layerlaws.coupling.operators import (
    DenseJacobian,
    Factors,
    Linearisation,
    Operator,
    Products,
    TokenJacobian,
    coupling_stack,
    randomized_factors,
)
from layerlaws.coupling.settings import CouplingSettings
from layerlaws.coupling.trajectories import (
    equidistance_cv,
    expodistance,
    line_shape_score,
    step_lengths,
    windowed_line_shape,
)
from layerlaws.models.blocks import BlockCall, trace_blocks
from layerlaws.models.heads import lens_entropy_and_loss

log = logging.getLogger(__name__)

TOKEN_KINDS = ("self", "fixed_output", "fixed_input")


@dataclass(frozen=True)
class TokenCoupling:
    """Where token-wise coupling is measured: layer pairs (l, l′), numbered 1..L, and the
    fixed input and output tokens of the context kinds (indices 0..T−1; negative ones
    count from the end, −1 = the last token)."""

    layer_pairs: tuple[tuple[int, int], ...]
    fixed_input_token: int = 0
    fixed_output_token: int = -1

    @classmethod
    def of(cls, settings: CouplingSettings, num_layers: int) -> TokenCoupling:
        """The token-wise coupling ``settings`` ask for in a model of ``num_layers``
        blocks."""
        return cls(
            tuple(layer_pairs(settings.token_layers, num_layers)),
            settings.fixed_input_token,
            settings.fixed_output_token,
        )

    @property
    def layers(self) -> list[int]:
        """Every layer some pair names, in order."""
        return sorted({layer for pair in self.layer_pairs for layer in pair})

    def token(self, index: int, length: int, key: str) -> int:
        """A configured token index resolved in a prompt of ``length`` tokens."""
        if not -length <= index < length:
            raise LayerlawsError(
                f"coupling.{key} is {index} but a prompt has only {length} tokens; give an "
                f"index in -{length}..{length - 1}"
            )
        return index % length


@dataclass
class PromptMeasurement:
    """Everything measured on one prompt (rows are plain dicts for polars)."""

    depth: list[dict[str, Any]] = field(default_factory=list)
    singular_values: list[dict[str, Any]] = field(default_factory=list)
    tokens: list[dict[str, Any]] = field(default_factory=list)
    trajectories: list[dict[str, Any]] = field(default_factory=list)
    layers: list[dict[str, Any]] = field(default_factory=list)
    factors: dict[str, np.ndarray] = field(default_factory=dict)
    streams: np.ndarray | None = None
    depth_couplings: np.ndarray | None = None
    """A[a, b] = U′_bᵀ J_a V′_b of the last token's Jacobians, (L, L, K, K) float32, K
    the smallest of ``ks``."""
    token_couplings: np.ndarray | None = None
    """A[t, t′] of the ``self`` kind at the first token layer pair: J^l_{tt} with the
    singular vectors of J^{l′}_{t′t′}, (T, T, K, K) float32."""


class BlockJacobians:
    """The Jacobians J_{t1 t2} of one block at its stream (T, d), as operators: formed by
    d VJPs (``svd`` full or randomized) or matrix-free, each output token's products
    through the block re-run for that token alone where its family allows
    (``products: token_local``, ``layerlaws.coupling.local``), through the whole sequence
    otherwise (``Linearisation``)."""

    def __init__(
        self, call: BlockCall, stream: torch.Tensor, svd: str, products: str, vjp_chunk: int
    ) -> None:
        self.matrix_free = svd == MATRIX_FREE
        self.whole = Linearisation(call.branch, stream, vjp_chunk)
        self.local = (
            TokenLocalBlock(call, stream, vjp_chunk * stream.shape[0])
            if products == TOKEN_LOCAL
            else None
        )

    def between(self, output: int, inputs: Sequence[int]) -> list[Operator]:
        """J_{t1, output} for each t1 of ``inputs``."""
        context = any(token != output for token in inputs)
        local = None if self.local is None else self.local.at(output, context)
        products: Products = self.whole.at(output) if local is None else local
        if self.matrix_free:
            return [TokenJacobian(products, t1) for t1 in inputs]
        return [DenseJacobian(matrix) for matrix in products.rows(list(inputs))]


def _factors(operator: Operator, k: int, svd: str, seed: int) -> Factors:
    """Top-``k`` singular triplets of a Jacobian as ``svd`` says."""
    if isinstance(operator, DenseJacobian):
        return top_singular(operator.matrix, k, svd, seed)
    return randomized_factors(operator, k, seed)


def _couplings(
    coupled: Sequence[Operator], factors: Sequence[Factors], k: int, swapped: bool
) -> tuple[torch.Tensor, torch.Tensor | None]:
    """A[a, b] = U′_bᵀ J_a V′_b, (n_a, n_b, k, k) float64, and the swapped ones if asked."""
    couplings = torch.stack([coupling_stack(op, factors, k) for op in coupled])
    if not swapped:
        return couplings, None
    return couplings, torch.stack([coupling_stack(op, factors, k, True) for op in coupled])


def _token_jacobians(
    jacobians: BlockJacobians, length: int, fixed_input: int, fixed_output: int
) -> dict[str, list[tuple[int, Operator]]]:
    """Per kind, (varying token, Jacobian (d, d)) of one block: J_{tt} for every t, J_{t,
    fixed_output} for t ≤ fixed_output, J_{fixed_input, t} for t ≥ fixed_input."""
    kinds: dict[str, list[tuple[int, Operator]]] = {kind: [] for kind in TOKEN_KINDS}
    for output in range(length):
        wanted = sorted({output} | ({fixed_input} if output >= fixed_input else set()))
        if output == fixed_output:
            wanted = list(range(output + 1))
        found = jacobians.between(output, wanted)
        kinds["self"].append((output, found[wanted.index(output)]))
        if output >= fixed_input:
            kinds["fixed_input"].append((output, found[wanted.index(fixed_input)]))
        if output == fixed_output:
            kinds["fixed_output"] = list(enumerate(found))
    return kinds


def measure_prompt(
    model: Any,
    input_ids: torch.Tensor,
    *,
    token_coupling: TokenCoupling,
    settings: CouplingSettings,
    vjp_chunk: int = 64,
    svd_length: int | None = None,
    jacobians: bool = True,
) -> PromptMeasurement:
    """Measure one prompt ``input_ids`` (1, T) as ``settings`` say (its ``ks``,
    ``metrics``, ``svd``, ``products``, ``svd_seed``, ``lss_window`` and ``final_norm``;
    ``token_coupling`` resolves its token layers), with ``vjp_chunk`` output rows per
    batched VJP; ``svd: auto`` chooses its path for prompts of ``svd_length`` tokens
    (this one's by default). Without ``jacobians``, the trajectories only. Layers are
    numbered 1..L (block l maps x^{l-1} to x^l); tokens 0..T−1."""
    calls, streams = trace_blocks(model, input_ids, settings.includes_final_norm)
    result = PromptMeasurement(streams=streams.float().cpu().numpy())
    if jacobians:
        _measure_jacobians(result, calls, streams, token_coupling, settings, vjp_chunk, svd_length)
    _measure_trajectories(result, model, streams, input_ids, settings)
    return result


def _measure_jacobians(
    result: PromptMeasurement,
    calls: Sequence[BlockCall],
    streams: torch.Tensor,
    token_coupling: TokenCoupling,
    settings: CouplingSettings,
    vjp_chunk: int,
    svd_length: int | None,
) -> None:
    """The depth and token-wise coupling of one prompt's traced ``calls`` and ``streams``
    (L + 1, T, d) into ``result`` (``measure_prompt``)."""
    n_layers, length = len(calls), streams.shape[1]
    if settings.svd == AUTO:
        shape = PromptShape(
            n_layers,
            streams.shape[2],
            svd_length or length,
            max(settings.ks),
            settings.metrics,
            token_coupling.layer_pairs,
        )
        settings = replace(settings, svd=shape.cheaper_svd(settings.products == TOKEN_LOCAL))
    ks, svd = settings.ks, settings.svd
    last, k_max, k_kept = length - 1, max(ks), min(ks)

    seed, swapped = settings.svd_seed, needs_swapped(settings.metrics)
    depth = [
        BlockJacobians(call, stream, svd, settings.products, vjp_chunk).between(last, [last])[0]
        for call, stream in zip(calls, streams, strict=False)
    ]
    depth_factors = [_factors(j, k_max, svd, seed) for j in depth]
    couplings, swapped_couplings = _couplings(depth, depth_factors, k_max, swapped)
    matrices = metric_matrices(
        couplings, swapped_couplings, [s for _, s, _ in depth_factors], ks, settings.metrics
    )
    result.depth = [
        {"layer_a": a + 1, "layer_b": b + 1, "k": k, "metric": metric, "miscoupling": float(value)}
        for (metric, k), matrix in matrices.items()
        for (a, b), value in np.ndenumerate(matrix.numpy())
    ]
    result.depth_couplings = _kept(couplings, k_kept)
    result.factors = {
        "u": torch.stack([u for u, _, _ in depth_factors]).cpu().numpy(),
        "s": torch.stack([s for _, s, _ in depth_factors]).cpu().numpy(),
        "v": torch.stack([v for _, _, v in depth_factors]).cpu().numpy(),
    }
    result.singular_values = [
        {"layer": layer, "rank": rank, "singular_value": float(value)}
        for layer, values in enumerate(result.factors["s"], start=1)
        for rank, value in enumerate(values, start=1)
    ]

    fixed_input = token_coupling.token(
        token_coupling.fixed_input_token, length, "fixed_input_token"
    )
    fixed_output = token_coupling.token(
        token_coupling.fixed_output_token, length, "fixed_output_token"
    )
    needs_values = bool(set(settings.metrics) - OWN_VALUES_FREE)
    jacobians = {
        layer: _token_jacobians(
            BlockJacobians(calls[layer - 1], streams[layer - 1], svd, settings.products, vjp_chunk),
            length,
            fixed_input,
            fixed_output,
        )
        for layer in token_coupling.layers
    }
    for pair, (layer_a, layer_b) in enumerate(token_coupling.layer_pairs):
        for kind in TOKEN_KINDS:
            tokens = [token for token, _ in jacobians[layer_a][kind]]
            coupled = [j for _, j in jacobians[layer_a][kind]]
            factors = [_factors(j, k_max, svd, seed) for _, j in jacobians[layer_b][kind]]
            own = None
            if needs_values:  # the released metrics divide by the coupled J's own values
                own = (
                    [s for _, s, _ in factors]
                    if layer_a == layer_b
                    else [_factors(j, k_max, svd, seed)[1] for j in coupled]
                )
            couplings, swapped_couplings = _couplings(coupled, factors, k_max, swapped)
            matrices = metric_matrices(couplings, swapped_couplings, own, ks, settings.metrics)
            if pair == 0 and kind == "self":
                result.token_couplings = _kept(couplings, k_kept)
            result.tokens += [
                {
                    "layer_a": layer_a,
                    "layer_b": layer_b,
                    "kind": kind,
                    "token_a": tokens[a],
                    "token_b": tokens[b],
                    "k": k,
                    "metric": metric,
                    "miscoupling": float(value),
                }
                for (metric, k), matrix in matrices.items()
                for (a, b), value in np.ndenumerate(matrix.numpy())
            ]


def _measure_trajectories(
    result: PromptMeasurement,
    model: Any,
    streams: torch.Tensor,
    input_ids: torch.Tensor,
    settings: CouplingSettings,
) -> None:
    """The trajectory measures of one prompt's streams (L + 1, T, d) into ``result``."""
    n_layers, length = streams.shape[0] - 1, streams.shape[1]
    entropy, loss = lens_entropy_and_loss(
        model, streams, input_ids[0], normed_last=settings.includes_final_norm
    )
    for token in range(length):
        trajectory = result.streams[:, token]
        result.trajectories.append(
            {
                "token": token,
                "lss": line_shape_score(trajectory),
                "expodistance": expodistance(trajectory),
                "equidistance_cv": equidistance_cv(trajectory),
            }
        )
        norms = np.linalg.norm(trajectory.astype(np.float64), axis=1)
        steps = np.concatenate([[np.nan], step_lengths(trajectory)])
        windows = np.concatenate([[np.nan], windowed_line_shape(trajectory, settings.lss_window)])
        result.layers += [
            {
                "token": token,
                "layer": layer,
                "norm": float(norms[layer]),
                "step_length": float(steps[layer]),
                "lss_window": float(windows[layer]),
                "logit_entropy": float(entropy[layer, token]),
                "next_token_loss": float(loss[layer, token]),
            }
            for layer in range(n_layers + 1)
        ]


def _kept(couplings: torch.Tensor, k: int) -> np.ndarray:
    """The coupling matrices (n_a, n_b, K, K) cut to K = ``k``, float32 on the CPU."""
    return couplings[:, :, :k, :k].float().cpu().numpy()


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
        log.info("%s prompt %d (%d tokens) done", weights, index, len(ids))
        if saves is not None and number < len(units):
            state = {"units_hash": _units_hash(units[:number]), "measured": measured}
            saves.save_if_due(state, f"prompt {number} of {len(units)}")
    return {
        (weights, index): result
        for (weights, index, _), result in zip(units, measured, strict=True)
    }


def _units_hash(units: Sequence[tuple[str, int, list[int]]]) -> str:
    """sha256 of (weights, prompt index, token ids) of ``units``, in order: the prompts
    measured so far."""
    return hashlib.sha256(repr(list(units)).encode()).hexdigest()


def _resumed(
    saves: ProgressSaves, units: Sequence[tuple[str, int, list[int]]]
) -> list[PromptMeasurement]:
    """The measurements of the first ``units`` (weights, prompt index, token ids) kept by
    the last save; [] when there is none or it holds other prompts (logged)."""
    state = saves.load()
    if state is None:
        return []
    done = len(state["measured"])
    if done > len(units) or state["units_hash"] != _units_hash(units[:done]):
        log.warning(
            "discarding the progress save %s: its %d measured prompts are not the first of "
            "this job's %d; starting from the beginning",
            saves.path,
            done,
            len(units),
        )
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
