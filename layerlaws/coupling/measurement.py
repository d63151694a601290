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
"""

from __future__ import annotations

import logging
from collections.abc import Collection, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

import numpy as np
import torch

from layerlaws.core.errors import LayerlawsError
from layerlaws.coupling.costs import AUTO, MATRIX_FREE, TOKEN_LOCAL, PromptShape
from layerlaws.coupling.jacobians import top_singular
from layerlaws.coupling.layers import layer_pairs as layer_pairs
from layerlaws.coupling.local import TokenLocalBlock
from layerlaws.coupling.miscoupling import metric_matrices, needs_own_values, needs_swapped
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
from layerlaws.coupling.token_means import token_means
from layerlaws.coupling.trajectories import (
    equidistance_cv,
    expodistance,
    line_shape_score,
    step_lengths,
    windowed_line_shape,
)
from layerlaws.coupling.workflow import ks_beyond
from layerlaws.models.blocks import BlockCall, trace_blocks
from layerlaws.models.heads import lens_entropy_and_loss

log = logging.getLogger(__name__)

COUPLING_KINDS = ("depth", "tokens", "trajectories", "logit_lens")
"""What ``measure_prompt`` measures of a prompt: the depth-wise coupling of its last
token's Jacobians (Aubry et al. §3), the token-wise kinds (§3.1), the trajectories' line
shape and expodistance (§4, Fig. 23–25) and the logit lens of every layer's state (the
head's entropy and next-token loss, added to the ``layers`` rows)."""
TRAJECTORY_KINDS = ("trajectories", "logit_lens")
"""The kinds a prompt set measures of a prompt whose Jacobians it leaves out
(``coupling.prompts.<set>.jacobian_prompts``)."""
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
    token_means: list[dict[str, Any]] = field(default_factory=list)
    """The statistics of ``tokens`` over pairs of distinct tokens
    (``layerlaws.coupling.token_means``)."""
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


def _row_by_row(
    coupled: Sequence[Operator],
    factors: Sequence[Factors],
    own: Sequence[torch.Tensor] | None,
    settings: CouplingSettings,
    swapped: bool,
    kept: int | None,
) -> tuple[dict[tuple[str, int], torch.Tensor], np.ndarray | None]:
    """``metric_matrices`` of A[a, b] = U′_bᵀ J_a V′_b (``_couplings``) made a row a at a
    time: each row's (n_b, K_max, K_max) float64 is measured and dropped before the next,
    so a prompt's token pairs hold n_b K_max² values, not n_a n_b K_max² (328 MB at
    T = 128, K_max = 50, twice with the swapped ones). Returns the metrics' (n_a, n_b)
    matrices and, with ``kept``, the A cut to K = ``kept`` (``_kept``; else None)."""
    rows, kept_rows = [], []
    for a, operator in enumerate(coupled):
        couplings, swapped_couplings = _couplings([operator], factors, max(settings.ks), swapped)
        values = None if own is None else [own[a]]
        rows.append(
            metric_matrices(couplings, swapped_couplings, values, settings.ks, settings.metrics)
        )
        if kept is not None:
            kept_rows.append(_kept(couplings, kept))
    matrices = {key: torch.cat([row[key] for row in rows]) for key in rows[0]}
    return matrices, np.concatenate(kept_rows) if kept is not None else None


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
    kinds: Collection[str] = COUPLING_KINDS,
) -> PromptMeasurement:
    """Measure the ``kinds`` (``COUPLING_KINDS``, all by default) of one prompt
    ``input_ids`` (1, T) as ``settings`` say (its ``ks``, ``metrics``, ``svd``,
    ``products``, ``svd_seed``, ``lss_window`` and ``final_norm``; ``token_coupling``
    resolves its token layers), with ``vjp_chunk`` output rows per batched VJP; ``svd:
    auto`` chooses its path for prompts of ``svd_length`` tokens (this one's by default).
    Layers are numbered 1..L (block l maps x^{l-1} to x^l); tokens 0..T−1."""
    unknown = sorted(set(kinds) - set(COUPLING_KINDS))
    if unknown or not kinds:
        raise LayerlawsError(
            f"coupling kinds {unknown or list(kinds)}: measure one or more of "
            f"{list(COUPLING_KINDS)}"
        )
    calls, streams = trace_blocks(model, input_ids, settings.includes_final_norm)
    result = PromptMeasurement(streams=streams.float().cpu().numpy())
    if {"depth", "tokens"} & set(kinds):
        chosen = _chosen_svd(settings, len(calls), streams, token_coupling, svd_length)
        if "depth" in kinds:
            _measure_depth(result, calls, streams, chosen, vjp_chunk)
        if "tokens" in kinds:
            _measure_tokens(result, calls, streams, token_coupling, chosen, vjp_chunk)
            result.token_means = token_means(result.tokens)
    if "trajectories" in kinds:
        _measure_trajectories(result, settings)
    if "logit_lens" in kinds:
        _measure_logit_lens(result, model, streams, input_ids, settings)
    return result


def require_ks_within(settings: CouplingSettings, hidden_size: int) -> None:
    """Refuse, before any model runs, a K of ``coupling.ks`` beyond the hidden size d (the
    workflow checks it when it plans, where d is known then: ``pipeline.preflight``)."""
    problem = ks_beyond(settings.ks, hidden_size)
    if problem:
        raise LayerlawsError(problem)


def _chosen_svd(
    settings: CouplingSettings,
    n_layers: int,
    streams: torch.Tensor,
    token_coupling: TokenCoupling,
    svd_length: int | None,
) -> CouplingSettings:
    """``settings`` with ``svd: auto`` resolved to the cheaper path for prompts of
    ``svd_length`` tokens (the streams' (L + 1, T, d) by default) and ``n_layers`` blocks."""
    if settings.svd != AUTO:
        return settings
    shape = PromptShape(
        n_layers,
        streams.shape[2],
        svd_length or streams.shape[1],
        max(settings.ks),
        settings.metrics,
        token_coupling.layer_pairs,
    )
    return replace(settings, svd=shape.cheaper_svd(settings.products == TOKEN_LOCAL))


def _measure_depth(
    result: PromptMeasurement,
    calls: Sequence[BlockCall],
    streams: torch.Tensor,
    settings: CouplingSettings,
    vjp_chunk: int,
) -> None:
    """The depth coupling of one prompt's traced ``calls`` and ``streams`` (L + 1, T, d)
    into ``result``: the last token's J^l, their miscoupling, couplings, factors and
    singular values (``measure_prompt``; ``settings.svd`` resolved)."""
    ks, svd, seed = settings.ks, settings.svd, settings.svd_seed
    last, k_max = streams.shape[1] - 1, max(ks)
    depth = [
        BlockJacobians(call, stream, svd, settings.products, vjp_chunk).between(last, [last])[0]
        for call, stream in zip(calls, streams, strict=False)
    ]
    depth_factors = [_factors(j, k_max, svd, seed) for j in depth]
    couplings, swapped_couplings = _couplings(
        depth, depth_factors, k_max, needs_swapped(settings.metrics)
    )
    matrices = metric_matrices(
        couplings, swapped_couplings, [s for _, s, _ in depth_factors], ks, settings.metrics
    )
    result.depth = [
        {"layer_a": a + 1, "layer_b": b + 1, "k": k, "metric": metric, "miscoupling": float(value)}
        for (metric, k), matrix in matrices.items()
        for (a, b), value in np.ndenumerate(matrix.numpy())
    ]
    result.depth_couplings = _kept(couplings, min(ks))
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


def _measure_tokens(
    result: PromptMeasurement,
    calls: Sequence[BlockCall],
    streams: torch.Tensor,
    token_coupling: TokenCoupling,
    settings: CouplingSettings,
    vjp_chunk: int,
) -> None:
    """The token-wise coupling of one prompt's traced ``calls`` and ``streams`` (L + 1, T,
    d) into ``result``: every kind at every layer pair of ``token_coupling``, and the
    couplings of the ``self`` kind at the first pair (``measure_prompt``; ``settings.svd``
    resolved)."""
    ks, svd, seed = settings.ks, settings.svd, settings.svd_seed
    length, k_max, swapped = streams.shape[1], max(ks), needs_swapped(settings.metrics)
    fixed_input = token_coupling.token(
        token_coupling.fixed_input_token, length, "fixed_input_token"
    )
    fixed_output = token_coupling.token(
        token_coupling.fixed_output_token, length, "fixed_output_token"
    )
    needs_values = needs_own_values(settings.metrics)
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
            kept = min(ks) if pair == 0 and kind == "self" else None
            matrices, couplings = _row_by_row(coupled, factors, own, settings, swapped, kept)
            if kept is not None:
                result.token_couplings = couplings
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


def _measure_trajectories(result: PromptMeasurement, settings: CouplingSettings) -> None:
    """The trajectory measures of one prompt's ``result.streams`` (L + 1, T, d) into
    ``result``: per token its line-shape score, expodistance and equidistance; per token
    and layer its norm, step length and windowed line-shape score."""
    n_layers, length = result.streams.shape[0] - 1, result.streams.shape[1]
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
            }
            for layer in range(n_layers + 1)
        ]


def _measure_logit_lens(
    result: PromptMeasurement,
    model: Any,
    streams: torch.Tensor,
    input_ids: torch.Tensor,
    settings: CouplingSettings,
) -> None:
    """The logit lens of one prompt's ``streams`` (L + 1, T, d) added to the rows of
    ``result.layers`` (one per token and layer, ``_measure_trajectories``; made here when
    the trajectories are not measured): the entropy of the model's head at x^l and its
    loss on the next token."""
    entropy, loss = lens_entropy_and_loss(
        model, streams, input_ids[0], normed_last=settings.includes_final_norm
    )
    if not result.layers:
        layers, length = streams.shape[0], streams.shape[1]
        result.layers = [
            {"token": token, "layer": layer} for token in range(length) for layer in range(layers)
        ]
    for row in result.layers:
        row["logit_entropy"] = float(entropy[row["layer"], row["token"]])
        row["next_token_loss"] = float(loss[row["layer"], row["token"]])


def _kept(couplings: torch.Tensor, k: int) -> np.ndarray:
    """The coupling matrices (n_a, n_b, K, K) cut to K = ``k``, float32 on the CPU."""
    return couplings[:, :, :k, :k].float().cpu().numpy()
