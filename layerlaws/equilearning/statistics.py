"""Per-layer prediction residuals for every target offset, norm and control, from
statistics streamed while the model runs.

For target offset k the regression rows are (h[l][s,t], x[s,t+k]) over the text tokens t
of each sequence s for which t+k is also a text token of s (special tokens and padding are
never inputs nor targets). The target is the token id as a real number, or under the
``shuffled_vocab`` control its image under a fixed random permutation: by default (He &
Su's released code, ``shuffle: present``) a seeded bijection of the ids that occur as
targets of that offset onto themselves, so the targets keep their set of values; under
``shuffle: vocabulary`` a permutation of the whole vocabulary.

``EquilearningStatistics`` observes a forward pass (``layerlaws.forward.model_pass``): for every
layer and norm it merges, batch by batch and on the device the layer runs on, the float64
co-moment of [normalised features, all targets]; the few rows that lack a target (the
ends of sequences) are also kept as their own co-moment per offset and removed at the end
(``Moments.__sub__``), so adding targets costs almost nothing. Nothing of size tokens ×
layers × hidden is kept: memory is (1 + offsets lacking rows) co-moments of width
hidden_size + offsets × controls per layer and norm, whatever the number of tokens.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence

import numpy as np
import polars as pl
import torch

from layerlaws.core.errors import LayerlawsError
from layerlaws.equilearning.norms import normalize
from layerlaws.equilearning.regression import DEFAULT_CUTOFF, Moments, prediction_residuals
from layerlaws.forward.model_pass import Batch, text_rows
from layerlaws.models.facts import ModelFacts

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


def target_ids(rows: pl.DataFrame, offsets: Sequence[int]) -> tuple[np.ndarray, np.ndarray]:
    """For each row and offset k, the id of the token k positions on in the same sequence.

    ``rows`` has columns sentence_id, position, token_id (the observed rows, in order; a
    sequence's rows are all present), and optionally is_target (masked-LM probing: only
    those rows have targets). Returns ``ids`` (n_rows, len(offsets)) int64, 0 where there
    is no such text token, and ``defined`` (n_rows, len(offsets)) bool.
    """
    lookup = rows.select("sentence_id", "position", pl.col("token_id").alias("target_id"))
    ids, defined = [], []
    for offset in offsets:
        shifted = rows.select("sentence_id", (pl.col("position") + offset).alias("position"))
        target = shifted.join(
            lookup, on=["sentence_id", "position"], how="left", maintain_order="left"
        )["target_id"]
        defined.append(target.is_not_null().to_numpy())
        ids.append(target.fill_null(0).to_numpy().astype(np.int64))
    if "is_target" in rows.columns:
        defined = [column & rows["is_target"].to_numpy() for column in defined]
    return np.column_stack(ids), np.column_stack(defined)


def target_matrix(
    rows: pl.DataFrame,
    offsets: Sequence[int],
    controls: Sequence[str],
    permutations: Sequence[np.ndarray],
) -> tuple[np.ndarray, np.ndarray]:
    """Targets of each regression row: ``values`` (n_rows, len(offsets) · len(controls))
    float64, column ``i · len(controls) + j`` for offset i and control j (the token id,
    under ``shuffled_vocab`` its image by ``permutations[i]``, a map of token ids), 0
    where undefined, and ``defined`` (n_rows, len(offsets)) bool."""
    ids, defined = target_ids(rows, offsets)
    values = [
        np.where(
            defined[:, i],
            permutations[i][ids[:, i]] if control == "shuffled_vocab" else ids[:, i],
            0,
        )
        for i in range(len(offsets))
        for control in controls
    ]
    return np.column_stack(values).astype(np.float64), defined


def vocabulary_permutation(vocab_size: int, shuffle_seed: int) -> np.ndarray:
    """The fixed random permutation of every token id (``shuffle: vocabulary``)."""
    return np.random.default_rng(shuffle_seed).permutation(vocab_size)


def present_permutation(present: np.ndarray, vocab_size: int, shuffle_seed: int) -> np.ndarray:
    """A map of the ``vocab_size`` token ids that permutes the ids ``present`` (sorted,
    distinct) among themselves by a seeded random bijection and leaves the others alone
    (``shuffle: present``, He & Su's released code)."""
    mapping = np.arange(vocab_size)
    mapping[present] = np.random.default_rng(shuffle_seed).permutation(present)
    return mapping


def present_ids(tokens: pl.DataFrame, offsets: Sequence[int]) -> list[np.ndarray]:
    """For each offset, the distinct ids (sorted, int64) that occur as its targets among
    the observed rows of ``tokens`` (a tokens table as the pass reads it)."""
    ids, defined = target_ids(text_rows(tokens), offsets)
    return [np.unique(ids[defined[:, i], i]) for i in range(len(offsets))]


def shuffled_maps(
    vocab_size: int, n_offsets: int, shuffle_seed: int, present: Sequence[np.ndarray] | None
) -> list[np.ndarray]:
    """The ``shuffled_vocab`` map of each offset: ``present_permutation`` of its present
    ids, or one ``vocabulary_permutation`` for all offsets when ``present`` is None."""
    if present is None:
        return [vocabulary_permutation(vocab_size, shuffle_seed)] * n_offsets
    return [present_permutation(ids, vocab_size, shuffle_seed) for ids in present]


def check_enough_rows(tokens: pl.DataFrame, offsets: Sequence[int], hidden_size: int) -> None:
    """A LayerlawsError, before any model runs, when an offset has no more regression rows
    than features (the fit would be exact and PR meaningless)."""
    _, defined = target_ids(text_rows(tokens), offsets)
    for offset, count in zip(offsets, defined.sum(axis=0), strict=True):
        if count <= hidden_size + 1:
            raise LayerlawsError(
                f"only {count} regression rows for target offset {offset:+d}, but the hidden "
                f"size is {hidden_size}: the fit would be exact and PR meaningless. Sample "
                f"more or longer texts (n_samples, max_tokens)"
            )


def normalized(features: torch.Tensor, norm: str, facts: ModelFacts) -> torch.Tensor:
    """A layer's ``features`` under ``norm`` (``OUTPUT``: as they are); ``model`` leaves a
    post-LN model's stream as it is (He & Su apply the default-initialised norm to pre-LN
    models only: a post-LN block already normalises what it outputs)."""
    if norm == OUTPUT or (norm == "model" and facts.post_ln):
        return features
    return normalize(features, norm, facts.norm_type, facts.norm_eps)


class EquilearningStatistics:
    """The co-moments of every layer × norm, streamed from a forward pass (an Observer).

    Norms apply to layers l < L; layer L is used as the model outputs it, so its
    statistics are gathered once and its PR reported under every norm. ``present`` (one
    array per offset, ``present_ids``) makes ``shuffled_vocab`` permute those ids among
    themselves; None permutes the whole vocabulary.
    """

    progress_attributes = ("total", "lacking")

    def __init__(
        self,
        facts: ModelFacts,
        offsets: Sequence[int],
        norms: Sequence[str],
        controls: Sequence[str],
        shuffle_seed: int,
        present: Sequence[np.ndarray] | None = None,
    ) -> None:
        self.facts, self.offsets = facts, list(offsets)
        self.norms, self.controls = list(norms), list(controls)
        self.permutations = shuffled_maps(facts.vocab_size, len(offsets), shuffle_seed, present)
        """Per offset, the map of token ids of the ``shuffled_vocab`` control."""
        self.total: dict[tuple[int, str], Moments] = {}
        """(layer, norm) → moments of [features, targets] over all rows."""
        self.lacking: dict[tuple[int, str, int], Moments] = {}
        """(layer, norm, offset index) → moments over the rows lacking that target."""
        self._targets = torch.empty(0)
        self._defined = torch.empty(0, dtype=torch.bool)
        self._on_device: dict[torch.device, tuple[torch.Tensor, torch.Tensor]] = {}
        """The current rows' targets and defined masks, copied once to each device."""

    def begin_batch(self, batch: Batch) -> None:
        self.begin_rows(batch.rows)

    def begin_rows(self, rows: pl.DataFrame) -> None:
        """The rows (``sentence_id``, ``position``, ``token_id``; whole sequences) that the
        next ``observe`` calls hold, in order."""
        values, defined = target_matrix(rows, self.offsets, self.controls, self.permutations)
        self._targets, self._defined = torch.from_numpy(values), torch.from_numpy(defined)
        self._on_device.clear()

    def norms_of(self, layer: int) -> list[str]:
        return self.norms if layer < self.facts.num_layers else [OUTPUT]

    def observe(self, layer: int, states: torch.Tensor) -> None:
        """Merge one batch's rows of ``layer`` (n, hidden_size). The rows of every norm are
        prepared first and merged after (merging allocates nothing of size p × p), so an
        out-of-memory error leaves the totals untouched."""
        device = states.device
        if device not in self._on_device:
            self._on_device[device] = (self._targets.to(device), self._defined.to(device))
        targets, defined = self._on_device[device]
        # Rows with no target at any offset (unmasked rows of masked-LM probing) count
        # nowhere: leaving them out beats adding and subtracting them.
        useful = defined.any(dim=1)
        targets, defined = targets[useful], defined[useful]
        features = states[useful].to(torch.float64)
        lacking = [i for i in range(len(self.offsets)) if not defined[:, i].all()]
        prepared: list[tuple[Moments, torch.Tensor]] = []
        for norm in self.norms_of(layer):
            transformed = self._normalize(features, norm)
            rows = torch.cat([transformed, targets], dim=1)
            prepared.append((self._accumulator(self.total, (layer, norm), rows), rows))
            for index in lacking:
                key = (layer, norm, index)
                part = rows[~defined[:, index]]
                prepared.append((self._accumulator(self.lacking, key, part), part))
        for moments, rows in prepared:
            moments.add_rows_(rows)

    def merge_(self, other: EquilearningStatistics) -> None:
        """Merge the moments of ``other`` (another shard's rows), in float64 (Chan, Golub
        & LeVeque's pairwise update)."""
        for store, merged in ((self.total, other.total), (self.lacking, other.lacking)):
            for key, moments in merged.items():
                store[key] = store[key] + moments if key in store else moments

    @staticmethod
    def _accumulator(store: dict, key: tuple, rows: torch.Tensor) -> Moments:
        """The moments of ``key``, created (empty) when first needed."""
        if key not in store:
            store[key] = Moments.empty(rows.shape[1], rows.device)
        return store[key]

    def _normalize(self, features: torch.Tensor, norm: str) -> torch.Tensor:
        return normalized(features, norm, self.facts)

    def table(self, cutoff: float = DEFAULT_CUTOFF) -> pl.DataFrame:
        """PR for every layer 0..L × offset × norm × control (columns of ``PR_SCHEMA``)."""
        hidden_size, width = self.facts.hidden_size, len(self.controls)
        records = []
        for layer in range(self.facts.num_layers + 1):
            for norm in self.norms_of(layer):
                total = self.total[layer, norm]
                for index, offset in enumerate(self.offsets):
                    lacking = self.lacking.get((layer, norm, index))
                    rows = total if lacking is None else total - lacking
                    columns = [hidden_size + index * width + j for j in range(width)]
                    subset = rows.select([*range(hidden_size), *columns])
                    pr, _rank = prediction_residuals(subset, hidden_size, cutoff)
                    for control, value in zip(self.controls, pr, strict=True):
                        for applied in self.norms if norm == OUTPUT else [norm]:
                            records.append((layer, offset, applied, control, float(value), rows.n))
        return pl.DataFrame(records, schema=PR_SCHEMA, orient="row")
