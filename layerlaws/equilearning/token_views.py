"""Token views (He & Su, Fig. 2 and S1–S6): the contextual embeddings of chosen tokens at
chosen layers, projected on the plane of their first two principal components.

A group is a few words (``they``/``them``); a word stands for the vocabulary entries that
encode it as one token, with and without a leading space. Before the pass the rows to keep
are chosen from the tokens table — the text tokens whose id is one of a group's, at most
``max_rows`` per word, the first in row order — so the choice does not depend on batching,
and only those rows' states are kept (float32, one array per layer). The PCA of a group at
a layer is fitted, in float64, on that group's rows at that layer.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import polars as pl
import torch

from layerlaws.core.errors import LayerlawsError
from layerlaws.core.geometry import principal_plane
from layerlaws.equilearning.statistics import OUTPUT, normalized
from layerlaws.forward.model_pass import text_rows
from layerlaws.models.facts import ModelFacts

log = logging.getLogger(__name__)

TOKEN_VIEW_SCHEMA = {
    "group": pl.String,
    "word": pl.String,
    "token_id": pl.Int64,
    "layer": pl.Int64,
    "sentence_id": pl.Int64,
    "position": pl.Int64,
    "pc1": pl.Float64,
    "pc2": pl.Float64,
}


def word_token_ids(groups: Sequence[Sequence[str]], tokenizer: Any) -> dict[str, list[int]]:
    """Each word's vocabulary ids: the single-token encodings of ``word`` and `` word``
    (the unknown token does not count). A word that is a single token in neither form
    cannot be viewed: it is left out with a warning (the defaults must work for every
    model of a series, whatever its vocabulary)."""
    ids: dict[str, list[int]] = {}
    for word in (word for group in groups for word in group):
        found = set()
        for form in (word, f" {word}"):
            encoded = tokenizer(form, add_special_tokens=False)["input_ids"]
            if len(encoded) == 1 and encoded[0] != tokenizer.unk_token_id:
                found.add(int(encoded[0]))
        if found:
            ids[word] = sorted(found)
        else:
            log.warning(
                "token views: %r is not a single token of this tokenizer and is left out",
                word,
            )
    return ids


def default_layers(num_layers: int) -> list[int]:
    """Four layers evenly spaced up to L: round(L/4), round(L/2), round(3L/4), L."""
    return sorted({max(1, round(num_layers * quarter / 4)) for quarter in (1, 2, 3, 4)})


@dataclass(frozen=True)
class ViewedRows:
    """The rows kept: their row number in ``text_rows`` order, sentence, position, token
    id and word."""

    table: pl.DataFrame

    @classmethod
    def choose(
        cls, tokens: pl.DataFrame, word_ids: Mapping[str, Sequence[int]], max_rows: int
    ) -> ViewedRows:
        rows = text_rows(tokens).with_row_index("row")
        words = pl.DataFrame(
            [{"word": word, "token_id": i} for word, ids in word_ids.items() for i in ids],
            schema={"word": pl.String, "token_id": pl.Int64},
        )
        chosen = (
            rows.join(words, on="token_id")
            .sort("row")
            .group_by("word", maintain_order=True)
            .head(max_rows)
            .sort("row")
        )
        return cls(chosen.with_columns(pl.col("row").cast(pl.Int64)))


class TokenViews:
    """An observer of ``run_forward_pass`` keeping the chosen rows' states at ``layers``
    (0…L) under one norm (layer L as the model outputs it)."""

    progress_attributes = ("states",)

    def __init__(
        self, facts: ModelFacts, rows: ViewedRows, layers: Sequence[int], norm: str
    ) -> None:
        beyond = [layer for layer in layers if not 0 <= layer <= facts.num_layers]
        if beyond:
            raise LayerlawsError(
                f"equilearning.token_views.layers {beyond} are not layers of a model with "
                f"{facts.num_layers} blocks (0…{facts.num_layers})"
            )
        self.facts, self.rows, self.layers, self.norm = facts, rows, sorted(layers), norm
        self._wanted = rows.table["row"].to_numpy()
        self._batch_rows = torch.empty(0, dtype=torch.long)
        self._batch_numbers = np.empty(0, dtype=np.int64)
        self.states: dict[int, list[tuple[np.ndarray, np.ndarray]]] = {
            layer: [] for layer in self.layers
        }

    def begin_batch(self, batch: Any) -> None:
        kept = np.isin(batch.row_numbers, self._wanted)
        self._batch_rows = torch.from_numpy(np.flatnonzero(kept))
        self._batch_numbers = batch.row_numbers[kept]

    def observe(self, layer: int, states: torch.Tensor) -> None:
        if layer not in self.states or len(self._batch_numbers) == 0:
            return
        features = states[self._batch_rows.to(states.device)].to(torch.float64)
        norm = self.norm if layer < self.facts.num_layers else OUTPUT
        kept = normalized(features, norm, self.facts).float().cpu().numpy()
        self.states[layer].append((self._batch_numbers.copy(), kept))

    def merge_(self, other: TokenViews) -> None:
        """Add the rows ``other`` (another shard) kept."""
        for layer, parts in other.states.items():
            self.states[layer].extend(parts)

    def arrays(self) -> dict[str, np.ndarray]:
        """``layer_{l}``: (rows, hidden_size) float32 in the order of ``rows.table``
        (sorted by row number; each row is observed once per layer)."""
        arrays = {}
        for layer, parts in self.states.items():
            numbers = np.concatenate([n for n, _ in parts] or [np.empty(0, np.int64)])
            values = np.concatenate(
                [v for _, v in parts] or [np.empty((0, self.facts.hidden_size), np.float32)]
            )
            if len(numbers) != self.rows.table.height:
                raise LayerlawsError(
                    f"token views: layer {layer} saw {len(numbers)} of the "
                    f"{self.rows.table.height} chosen rows"
                )
            arrays[f"layer_{layer}"] = values[np.argsort(numbers, kind="stable")]
        return arrays

    def table(self, groups: Sequence[Sequence[str]]) -> pl.DataFrame:
        """One row per kept token, group and layer with its coordinates on the group's
        first two principal components at that layer (``TOKEN_VIEW_SCHEMA``)."""
        arrays, frames = self.arrays(), []
        for group in groups:
            name = "/".join(group)
            members = self.rows.table.with_row_index("index").filter(pl.col("word").is_in(group))
            if members.height == 0:
                continue
            for layer in self.layers:
                points = arrays[f"layer_{layer}"][members["index"].to_numpy()]
                projected = principal_plane(points)
                frames.append(
                    members.select(
                        pl.lit(name).alias("group"),
                        "word",
                        "token_id",
                        pl.lit(layer).alias("layer"),
                        "sentence_id",
                        "position",
                        pl.Series("pc1", projected[:, 0]),
                        pl.Series("pc2", projected[:, 1]),
                    )
                )
        if not frames:
            return pl.DataFrame(schema=TOKEN_VIEW_SCHEMA)
        return pl.concat(frames).cast(TOKEN_VIEW_SCHEMA)
