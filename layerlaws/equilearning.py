"""Per-layer prediction residuals for every target offset, norm and control.

For target offset k the regression rows are (h[l][s,t], x[s,t+k]) over the text tokens t
of each sequence s for which t+k is also a text token of s (special tokens and padding are
never inputs nor targets). The target is the token id as a real number, or under the
``shuffled_vocab`` control its image under a fixed random permutation of the vocabulary.

Everything is computed from the cached hidden states, layer by layer and chunk by chunk:
one shared co-moment of [features, all targets] per chunk, from which the few rows that
lack a given target are removed again (``Moments.__sub__``), so adding targets costs
almost nothing.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence

import numpy as np
import polars as pl

from layerlaws.errors import LayerlawsError
from layerlaws.hidden import HiddenStates
from layerlaws.norms import normalize
from layerlaws.regression import DEFAULT_CUTOFF, Moments, prediction_residuals

log = logging.getLogger(__name__)

OUTPUT = "output"
"""Stands for "as the model outputs it" (layer L, whatever the norm)."""
PR_SCHEMA = {
    "layer": pl.Int64,
    "offset": pl.Int64,
    "norm": pl.String,
    "control": pl.String,
    "pr": pl.Float64,
    "n_rows": pl.Int64,
}


def target_matrix(
    rows: pl.DataFrame,
    offsets: Sequence[int],
    controls: Sequence[str],
    vocab_size: int,
    shuffle_seed: int,
) -> tuple[np.ndarray, np.ndarray]:
    """Targets of each regression row.

    ``rows`` has columns sentence_id, position, token_id (the hidden-state rows, in order).
    Returns ``values`` (n_rows, len(offsets) · len(controls)) float64, column
    ``i · len(controls) + j`` for offset i and control j, 0 where undefined, and
    ``defined`` (n_rows, len(offsets)) bool.
    """
    permutation = np.random.default_rng(shuffle_seed).permutation(vocab_size)
    lookup = rows.select("sentence_id", "position", pl.col("token_id").alias("target_id"))
    values, defined = [], []
    for offset in offsets:
        shifted = rows.select("sentence_id", (pl.col("position") + offset).alias("position"))
        joined = shifted.join(
            lookup, on=["sentence_id", "position"], how="left", maintain_order="left"
        )
        target = joined["target_id"]
        has_target = target.is_not_null().to_numpy()
        ids = target.fill_null(0).to_numpy().astype(np.int64)
        defined.append(has_target)
        for control in controls:
            mapped = permutation[ids] if control == "shuffled_vocab" else ids
            values.append(np.where(has_target, mapped, 0).astype(np.float64))
    return np.column_stack(values), np.column_stack(defined)


def _layer_moments(
    features: np.ndarray,
    targets: np.ndarray,
    defined: np.ndarray,
    transform: Callable[[np.ndarray], np.ndarray],
    chunk_rows: int,
) -> tuple[Moments, list[Moments]]:
    """Moments of [transform(features), targets] over all rows, and over the rows lacking
    each offset's target (few: a sequence's first or last |offset| tokens)."""
    hidden_size = features.shape[1]
    width = hidden_size + targets.shape[1]
    total = Moments.empty(width)
    lacking_rows: list[list[np.ndarray]] = [[] for _ in range(defined.shape[1])]
    joined = np.empty((min(chunk_rows, len(features)), width))
    for start in range(0, len(features), chunk_rows):
        stop = min(start + chunk_rows, len(features))
        rows = joined[: stop - start]
        rows[:, :hidden_size] = transform(np.asarray(features[start:stop], dtype=np.float64))
        rows[:, hidden_size:] = targets[start:stop]
        total = total + Moments.of_rows(rows)
        for index, kept in enumerate(lacking_rows):
            # Few rows lack a target (the ends of sequences): keep them, not their moments.
            kept.append(rows[~defined[start:stop, index]].copy())
    lacking = [Moments.of_rows(np.concatenate(kept)) for kept in lacking_rows]
    return total, lacking


def prediction_residual_table(
    hidden: HiddenStates,
    offsets: Sequence[int],
    norms: Sequence[str],
    controls: Sequence[str],
    shuffle_seed: int = 0,
    cutoff: float = DEFAULT_CUTOFF,
    regression_chunk_rows: int = 4096,
) -> pl.DataFrame:
    """PR for every layer 0..L × offset × norm × control (columns of ``PR_SCHEMA``),
    streaming ``regression_chunk_rows`` rows at a time (memory only).

    Norms apply to layers l < L; layer L is used as the model outputs it, so its PR is
    the same under every norm (computed once).
    """
    meta = hidden.metadata
    hidden_size, n_layers = hidden.hidden_size, hidden.num_layers
    targets, defined = target_matrix(
        hidden.rows, offsets, controls, meta["vocab_size"], shuffle_seed
    )
    counts = defined.sum(axis=0)
    for offset, count in zip(offsets, counts, strict=True):
        if count <= hidden_size + 1:
            raise LayerlawsError(
                f"only {count} regression rows for target offset {offset:+d}, but the hidden "
                f"size is {hidden_size}: the fit would be exact and PR meaningless. Sample "
                f"more or longer texts (n_samples, max_tokens)"
            )
    records = []
    for layer in range(n_layers + 1):
        features = hidden.layer(layer)
        # Layer L is the model's output: one pass serves every norm.
        for norm in norms if layer < n_layers else [OUTPUT]:

            def transform(x: np.ndarray, norm: str = norm) -> np.ndarray:
                if norm == OUTPUT:
                    return x
                return normalize(x, norm, meta["norm_type"], meta["norm_eps"])

            total, lacking = _layer_moments(
                features, targets, defined, transform, regression_chunk_rows
            )
            for index, offset in enumerate(offsets):
                columns = [hidden_size + index * len(controls) + j for j in range(len(controls))]
                subset = (total - lacking[index]).select([*range(hidden_size), *columns])
                pr, _rank = prediction_residuals(subset, hidden_size, cutoff)
                for control, value in zip(controls, pr, strict=True):
                    for applied in norms if norm == OUTPUT else [norm]:
                        records.append(
                            (layer, offset, applied, control, float(value), int(counts[index]))
                        )
        log.info("layer %d/%d done", layer, n_layers)
    return pl.DataFrame(records, schema=PR_SCHEMA, orient="row")
