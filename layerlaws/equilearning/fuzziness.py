"""Separation fuzziness of every layer (He & Su, Fig. S8), streamed from the model pass.

With the next token as the class c of a row h (a text token followed by a text token; for
masked-LM probing, the masked token itself: the probe's target offset),

    SS_w = (1/N) Σ_c Σ_{i∈c} (h_i − μ_c)(h_i − μ_c)ᵀ,   SS_b = (1/N) Σ_c n_c (μ_c − μ)(μ_c − μ)ᵀ,
    D = Tr(SS_w · SS_b⁺).

The classes are read from the tokens table before the pass. Under ``classes: all`` (the
default, He & Su's released code) every target id of the run is a class, however few its
rows; under ``frequent`` only those that follow at least ``min_rows`` text tokens of the
run, at most the ``max_classes`` most frequent (then SS_b has rank below the hidden size
and D is a different quantity). N is the number of rows of the counted classes. Per
layer and norm the observer holds the co-moment of the counted rows (hidden size², on
the device the layer runs on) and the class counts and sums (C × hidden size, on the
CPU, so that a whole run's classes need no GPU memory), float64: memory grows with the
classes present, not with the rows; SS_w = S_T − SS_b with S_T the total scatter. Each
batch's class sums are formed on the device over the classes the batch holds and added
to the CPU sums. SS_b⁺ drops eigenvalues below ``cutoff`` × the largest (SS_b has rank
at most C − 1).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
import polars as pl
import torch

from layerlaws.core.errors import LayerlawsError
from layerlaws.equilearning.regression import DEFAULT_CUTOFF, Moments
from layerlaws.equilearning.settings import FuzzinessSettings
from layerlaws.equilearning.statistics import OUTPUT, normalized, present_ids, target_ids
from layerlaws.forward.model_pass import text_rows
from layerlaws.models.facts import ModelFacts

FUZZINESS_SCHEMA = {
    "layer": pl.Int64,
    "norm": pl.String,
    "fuzziness": pl.Float64,
    "n_classes": pl.Int64,
    "n_rows": pl.Int64,
}


def fuzziness_classes(
    tokens: pl.DataFrame, min_rows: int, max_classes: int, target_offset: int = 1
) -> np.ndarray:
    """The classes counted: target ids (offset ``target_offset``) of at least ``min_rows``
    rows of ``tokens`` (a tokens table), the ``max_classes`` most frequent, sorted by id."""
    ids, defined = target_ids(text_rows(tokens), [target_offset])
    counts = np.bincount(ids[defined[:, 0], 0])
    frequent = np.flatnonzero(counts >= min_rows)
    chosen = frequent[np.argsort(-counts[frequent], kind="stable")[:max_classes]]
    return np.sort(chosen)


def counted_classes(
    tokens: pl.DataFrame, settings: FuzzinessSettings, target_offset: int = 1
) -> np.ndarray:
    """The classes ``settings`` count (sorted ids): every target id of ``tokens`` under
    ``classes: all``, ``fuzziness_classes`` under ``frequent``."""
    if settings.classes == "all":
        return present_ids(tokens, [target_offset])[0]
    return fuzziness_classes(tokens, settings.min_rows, settings.max_classes, target_offset)


def fuzziness(
    total: Moments, sums: torch.Tensor, counts: torch.Tensor, cutoff: float = DEFAULT_CUTOFF
) -> float:
    """D = Tr(SS_w SS_b⁺) from the moments of the counted rows, their per-class sums
    (C, p) and counts (C,) on the CPU. Float64."""
    n = total.n
    kept = counts > 0
    class_counts = counts[kept].to(torch.float64)
    means = sums[kept] / class_counts[:, None]
    deviations = means - total.mean.to("cpu")
    between = (deviations * class_counts[:, None]).T @ deviations / n
    within = total.comoment.to("cpu") / n - between
    values, vectors = torch.linalg.eigh(between)
    keep = values > cutoff * values.max()
    inverse = (vectors[:, keep] / values[keep]) @ vectors[:, keep].T
    return float(torch.trace(within @ inverse))


class SeparationFuzziness:
    """An observer of ``run_forward_pass``: the statistics of separation fuzziness of
    every layer × norm (layer L once, as the model outputs it)."""

    def __init__(
        self,
        facts: ModelFacts,
        norms: Sequence[str],
        classes: np.ndarray,
        target_offset: int = 1,
    ) -> None:
        if len(classes) < 2:
            raise LayerlawsError(
                f"separation fuzziness needs at least two next-token classes, found "
                f"{len(classes)}; sample more texts (or, under equilearning.fuzziness.classes: "
                f"frequent, lower min_rows)"
            )
        self.facts, self.norms, self.target_offset = facts, list(norms), target_offset
        self.classes = np.asarray(classes, dtype=np.int64)
        self.total: dict[tuple[int, str], Moments] = {}
        self.sums: dict[tuple[int, str], torch.Tensor] = {}
        """(layer, norm) → (C, p) float64 class sums, on the CPU."""
        self.counts: dict[tuple[int, str], torch.Tensor] = {}
        """(layer, norm) → (C,) int64 class counts, on the CPU."""
        self._rows = torch.empty(0, dtype=torch.long)
        self._local = torch.empty(0, dtype=torch.long)
        self._present = torch.empty(0, dtype=torch.long)

    def begin_batch(self, batch: Any) -> None:
        """The batch's rows whose target is a counted class; each row's index among the
        batch's distinct classes, and their indices among all classes."""
        ids, defined = target_ids(batch.rows, [self.target_offset])
        position = np.searchsorted(self.classes, ids[:, 0])
        position = np.minimum(position, len(self.classes) - 1)
        counted = defined[:, 0] & (self.classes[position] == ids[:, 0])
        present, local = np.unique(position[counted], return_inverse=True)
        self._rows = torch.from_numpy(np.flatnonzero(counted))
        self._local = torch.from_numpy(local.reshape(-1).astype(np.int64))
        self._present = torch.from_numpy(present.astype(np.int64))

    def _norms_of(self, layer: int) -> list[str]:
        return self.norms if layer < self.facts.num_layers else [OUTPUT]

    def _store(self, key: tuple[int, str], width: int, device: torch.device) -> None:
        """Empty statistics of ``key``, if it has none yet: moments on ``device``, class
        sums and counts on the CPU."""
        if key not in self.total:
            self.total[key] = Moments.empty(width, device)
            self.sums[key] = torch.zeros(len(self.classes), width, dtype=torch.float64)
            self.counts[key] = torch.zeros(len(self.classes), dtype=torch.long)

    def observe(self, layer: int, states: torch.Tensor) -> None:
        """Merge the counted rows of one batch of ``layer``; everything is computed (and
        every store allocated) before anything is merged, so an out-of-memory error
        changes nothing."""
        device = states.device
        rows, local = self._rows.to(device), self._local.to(device)
        features = states[rows].to(torch.float64)
        counts = torch.bincount(self._local, minlength=len(self._present))
        prepared = []
        for norm in self._norms_of(layer):
            transformed = normalized(features, norm, self.facts)
            sums = torch.zeros(
                len(self._present), features.shape[1], dtype=torch.float64, device=device
            )
            sums.index_add_(0, local, transformed)
            self._store((layer, norm), features.shape[1], device)
            prepared.append((norm, Moments.of_rows(transformed), sums.cpu()))
        for norm, moments, sums in prepared:
            key = (layer, norm)
            self.total[key].merge_(moments)
            self.sums[key].index_add_(0, self._present, sums)
            self.counts[key].index_add_(0, self._present, counts)

    def table(self, cutoff: float = DEFAULT_CUTOFF) -> pl.DataFrame:
        """``layer`` (0…L), ``norm``, ``fuzziness``, ``n_classes``, ``n_rows``; layer L
        under every norm."""
        records = []
        for layer in range(self.facts.num_layers + 1):
            for norm in self.norms:
                key = (layer, norm if layer < self.facts.num_layers else OUTPUT)
                counts = self.counts[key]
                records.append(
                    {
                        "layer": layer,
                        "norm": norm,
                        "fuzziness": fuzziness(self.total[key], self.sums[key], counts, cutoff),
                        "n_classes": int((counts > 0).sum()),
                        "n_rows": self.total[key].n,
                    }
                )
        return pl.DataFrame(records, schema=FUZZINESS_SCHEMA)
