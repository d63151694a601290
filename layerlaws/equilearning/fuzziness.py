"""Separation fuzziness of every layer (He & Su, Fig. S8), streamed from the model pass.

With the next token as the class c of a row h (a text token followed by a text token; for
masked-LM probing, the masked token itself: the probe's target offset),

    SS_w = (1/N) Σ_c Σ_{i∈c} (h_i − μ_c)(h_i − μ_c)ᵀ,   SS_b = (1/N) Σ_c n_c (μ_c − μ)(μ_c − μ)ᵀ,
    D = Tr(SS_w · SS_b⁺).

The classes and their row counts n_c are read from the tokens table before the pass.
Under ``classes: all`` (the default, He & Su's released code) every target id of the run
is a class, however few its rows; under ``frequent`` only those that follow at least
``min_rows`` text tokens of the run, at most the ``max_classes`` most frequent (then SS_b
has rank below the hidden size and D is a different quantity). N is the number of rows of
the counted classes.

Per layer and norm the observer holds, float64: the co-moment of the counted rows (hidden
size², on the device the layer runs on) and, on the CPU, B = Σ_c t_c t_cᵀ / n_c with
t_c = Σ_{i∈c} (h_i − r) the class sums about a reference r (the first batch's mean, to
keep the subtraction below well conditioned). A class is folded into B as soon as its
n_c rows are seen, so only the sums of the classes still open are held (a class of one
row is never stored): at most one per class of two rows or more, kept in blocks that are
allocated as classes open and dropped as they close. The blocks of each layer and norm
beyond its share of ``host_bytes`` (``execution.fuzziness_host_gb``; the first slots,
taken by the classes that open first, the frequent ones) are regions of a float64 file on
the scratch disk, memory-mapped (``OpenSums``): read and added to by the same float64
operations, so D is the same to the bit, with at most ``host_bytes`` of sums in host
memory (the kernel pages the file in and out). Then
N·SS_b = B − N (μ − r)(μ − r)ᵀ and SS_w = S_T − SS_b with S_T the total scatter. SS_b⁺
drops eigenvalues below ``cutoff`` × the largest (SS_b has rank at most C − 1).
"""

from __future__ import annotations

import tempfile
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import polars as pl
import torch

from layerlaws.core.errors import LayerlawsError
from layerlaws.equilearning.costs import (
    SUM_BYTES,
    blocks_in_memory,
    slots_in_memory,
    sums_per_block,
)
from layerlaws.equilearning.regression import DEFAULT_CUTOFF, Moments
from layerlaws.equilearning.settings import FuzzinessSettings
from layerlaws.equilearning.statistics import OUTPUT, normalized, target_ids
from layerlaws.forward.model_pass import text_rows
from layerlaws.models.facts import ModelFacts

FUZZINESS_SCHEMA = {
    "layer": pl.Int64,
    "norm": pl.String,
    "fuzziness": pl.Float64,
    "n_classes": pl.Int64,
    "n_rows": pl.Int64,
}


@dataclass(frozen=True)
class FuzzinessClasses:
    """The classes counted (sorted target ids) and the rows of each in the run."""

    ids: np.ndarray
    """(C,) int64, sorted."""
    sizes: np.ndarray
    """(C,) int64, n_c ≥ 1."""

    def __len__(self) -> int:
        return len(self.ids)

    @property
    def n_open_at_most(self) -> int:
        """Classes of two rows or more: the most class sums ever held."""
        return int((self.sizes >= 2).sum())


def target_counts(tokens: pl.DataFrame, target_offset: int = 1) -> tuple[np.ndarray, np.ndarray]:
    """The distinct target ids (offset ``target_offset``) of the text rows of ``tokens``
    (a tokens table), sorted, and the rows of each."""
    ids, defined = target_ids(text_rows(tokens), [target_offset])
    found, counts = np.unique(ids[defined[:, 0], 0], return_counts=True)
    return found.astype(np.int64), counts.astype(np.int64)


def _frequent(sizes: np.ndarray, min_rows: int, max_classes: int) -> np.ndarray:
    """Indices (sorted) of the ``max_classes`` largest of ``sizes`` ≥ ``min_rows``, ties to
    the lower index."""
    frequent = np.flatnonzero(sizes >= min_rows)
    return np.sort(frequent[np.argsort(-sizes[frequent], kind="stable")[:max_classes]])


def fuzziness_classes(
    tokens: pl.DataFrame, min_rows: int, max_classes: int, target_offset: int = 1
) -> np.ndarray:
    """The classes counted: target ids (offset ``target_offset``) of at least ``min_rows``
    rows of ``tokens`` (a tokens table), the ``max_classes`` most frequent, sorted by id."""
    ids, sizes = target_counts(tokens, target_offset)
    return ids[_frequent(sizes, min_rows, max_classes)]


def counted_classes(
    tokens: pl.DataFrame, settings: FuzzinessSettings, target_offset: int = 1
) -> FuzzinessClasses:
    """The classes ``settings`` count and their rows: every target id of ``tokens`` under
    ``classes: all``, ``fuzziness_classes`` under ``frequent``."""
    ids, sizes = target_counts(tokens, target_offset)
    if settings.classes == "frequent":
        chosen = _frequent(sizes, settings.min_rows, settings.max_classes)
        ids, sizes = ids[chosen], sizes[chosen]
    return FuzzinessClasses(ids, sizes)


def fuzziness(
    total: Moments, folded: torch.Tensor, reference: torch.Tensor, cutoff: float = DEFAULT_CUTOFF
) -> float:
    """D = Tr(SS_w SS_b⁺) from the moments of the counted rows and ``folded`` = Σ_c t_c t_cᵀ
    / n_c (p, p, on the CPU), t_c the sum of class c's rows minus ``reference`` (p,).
    Float64."""
    n = total.n
    shift = total.mean.to("cpu") - reference
    between = (folded - n * torch.outer(shift, shift)) / n
    within = total.comoment.to("cpu") / n - between
    values, vectors = torch.linalg.eigh(between)
    keep = values > cutoff * values.max()
    inverse = (vectors[:, keep] / values[keep]) @ vectors[:, keep].T
    return float(torch.trace(within @ inverse))


@dataclass(frozen=True)
class BatchPlan:
    """What one batch does to the classes of one layer (``present``: indices of the
    batch's classes among all)."""

    counts: np.ndarray
    """Rows seen of each present class after the batch."""
    closing: np.ndarray
    """Indices into present of the classes whose last rows are in the batch."""
    closing_slots: np.ndarray
    """Their slots (−1: every row in this batch, never stored)."""
    staying: np.ndarray
    """Indices into present of the classes open after the batch."""
    staying_slots: np.ndarray
    """Their slots (held, or newly taken: the lowest free)."""
    occupied: np.ndarray
    """Which slots are held after the batch."""


class ClassSlots:
    """Rows seen of each class of one layer, and the slot of each open class: an index
    into the held sums (−1: not open)."""

    def __init__(self, classes: FuzzinessClasses) -> None:
        self.sizes = classes.sizes
        self.seen = np.zeros(len(classes), dtype=np.int64)
        self.slot = np.full(len(classes), -1, dtype=np.int64)
        self.occupied = np.zeros(classes.n_open_at_most, dtype=bool)

    def plan(self, present: np.ndarray, batch_counts: np.ndarray) -> BatchPlan:
        """The batch's effect, nothing changed; a LayerlawsError when a class would get
        more rows than the tokens table gave it."""
        counts = self.seen[present] + batch_counts
        if (counts > self.sizes[present]).any():
            raise LayerlawsError(
                "the pass showed a class more rows than its tokens table holds; the "
                "fuzziness classes must be counted from the table the pass runs over"
            )
        closing = np.flatnonzero(counts == self.sizes[present])
        staying = np.flatnonzero(counts < self.sizes[present])
        occupied = self.occupied.copy()
        occupied[self.slot[present[closing]][self.slot[present[closing]] >= 0]] = False
        staying_slots = self.slot[present[staying]].copy()
        new = staying_slots < 0
        staying_slots[new] = np.flatnonzero(~occupied)[: new.sum()]
        occupied[staying_slots] = True
        return BatchPlan(
            counts, closing, self.slot[present[closing]], staying, staying_slots, occupied
        )

    def apply(self, present: np.ndarray, plan: BatchPlan) -> None:
        self.seen[present] = plan.counts
        self.slot[present[plan.closing]] = -1
        self.slot[present[plan.staying]] = plan.staying_slots
        self.occupied = plan.occupied

    def complete(self) -> bool:
        return bool((self.seen == self.sizes).all())


def spill_file(rows: int, width: int) -> np.memmap:
    """A (rows, width) float64 array of zeros in a file of the system's temporary folder
    (``TMPDIR``; a disk, not a RAM disk), memory-mapped: the file is unlinked as it is made,
    so its disk is freed when the array is, or when the process ends, however it ends."""
    with tempfile.TemporaryFile(prefix="layerlaws-open-sums-") as handle:
        handle.truncate(rows * width * SUM_BYTES)  # sparse: zeros that take no disk yet
        return np.memmap(handle, dtype=np.float64, mode="r+", shape=(rows, width))


class OpenSums:
    """The sums (about the reference) of the open classes of one layer and norm, float64
    on the CPU: blocks of ``block`` slots, at most ``n_slots`` in all, held only up to
    the last occupied slot; the first ``in_memory`` blocks in host memory (those within
    the first ``held`` sums; None: all), the others in a ``spill_file`` that the kernel
    pages in and out as they are read and added to, with the same float64 arithmetic.

    A block is dropped only when none of its slots is occupied, and a slot is zeroed when
    its class closes, so a dropped block is zero: a spilled block grown again is the same
    region of the file, zero without being written."""

    def __init__(self, n_slots: int, width: int, held: int | None = None) -> None:
        self.n_slots, self.width = n_slots, width
        self.block = sums_per_block(n_slots)
        self.in_memory = blocks_in_memory(n_slots, held)
        self.blocks: list[torch.Tensor] = []
        self._spill: np.memmap | None = None

    def _rows(self, block: int) -> int:
        return min(self.block, self.n_slots - block * self.block)

    def _spilled(self, block: int) -> torch.Tensor:
        """Block ``block`` (beyond those in memory): its region of the spill file."""
        if self._spill is None:
            self._spill = spill_file(self.n_slots - self.in_memory * self.block, self.width)
        start = (block - self.in_memory) * self.block
        return torch.from_numpy(self._spill[start : start + self._rows(block)])

    def __getstate__(self) -> dict[str, Any]:
        """Pickled (a progress save) with every block's sums, the spill file's read
        through its mapping; not the mapping itself."""
        return {**self.__dict__, "_spill": None}

    def __setstate__(self, state: dict[str, Any]) -> None:
        """Restored with the blocks beyond ``in_memory`` copied into a new spill file one
        at a time (from a save loaded memory-mapped, ``ProgressSaves.load``, they never
        all reach host memory)."""
        self.__dict__.update(state)
        for block in range(self.in_memory, len(self.blocks)):
            self.blocks[block] = self._spilled(block).copy_(self.blocks[block])

    def blocks_for(self, occupied: np.ndarray) -> int:
        """Blocks holding every occupied slot."""
        used = np.flatnonzero(occupied)
        return 0 if len(used) == 0 else int(used[-1]) // self.block + 1

    def new_blocks(self, count: int) -> list[torch.Tensor]:
        """Zero blocks beyond the held ones, up to ``count`` blocks."""
        return [
            torch.zeros(self._rows(b), self.width, dtype=torch.float64)
            if b < self.in_memory
            else self._spilled(b)
            for b in range(len(self.blocks), count)
        ]

    def _by_block(self, slots: np.ndarray) -> Iterator[tuple[int, np.ndarray, torch.Tensor]]:
        """(block, mask of ``slots`` in it, their rows in it)."""
        block, row = np.divmod(slots, self.block)
        for b in np.unique(block):
            mask = block == b
            yield int(b), mask, torch.from_numpy(row[mask])

    def gather(self, slots: np.ndarray) -> torch.Tensor:
        """The sums held at ``slots`` (all held), (len(slots), width)."""
        out = torch.zeros(len(slots), self.width, dtype=torch.float64)
        for b, mask, rows in self._by_block(slots):
            out[torch.from_numpy(mask)] = self.blocks[b][rows]
        return out

    def merge_(
        self,
        grown: list[torch.Tensor],
        freed: np.ndarray,
        slots: np.ndarray,
        sums: torch.Tensor,
        count: int,
    ) -> None:
        """Append ``grown``, zero the ``freed`` slots, add ``sums`` at ``slots``, keep
        ``count`` blocks."""
        self.blocks.extend(grown)
        for b, _, rows in self._by_block(freed):
            self.blocks[b][rows] = 0.0
        for b, mask, rows in self._by_block(slots):
            self.blocks[b].index_add_(0, rows, sums[torch.from_numpy(mask)])
        del self.blocks[count:]

    @property
    def held(self) -> int:
        """Class sums held."""
        return sum(len(block) for block in self.blocks)

    @property
    def spilled(self) -> int:
        """Class sums held in the spill file."""
        return sum(len(block) for block in self.blocks[self.in_memory :])


class SeparationFuzziness:
    """An observer of ``run_forward_pass``: the statistics of separation fuzziness of
    every layer × norm (layer L once, as the model outputs it)."""

    progress_attributes = ("total", "folded", "reference", "open", "slots")

    def __init__(
        self,
        facts: ModelFacts,
        norms: Sequence[str],
        classes: FuzzinessClasses,
        target_offset: int = 1,
        host_bytes: int | None = None,
    ) -> None:
        if len(classes) < 2:
            raise LayerlawsError(
                f"separation fuzziness needs at least two next-token classes, found "
                f"{len(classes)}; sample more texts (or, under equilearning.fuzziness.classes: "
                f"frequent, lower min_rows)"
            )
        self.facts, self.norms, self.target_offset = facts, list(norms), target_offset
        self.classes = classes
        self.host_bytes = host_bytes
        """``host_bytes``: host memory of the open class sums, all layers and norms (None:
        no limit); beyond it they are spilled to the scratch disk (``OpenSums``)."""
        self.total: dict[tuple[int, str], Moments] = {}
        self.folded: dict[tuple[int, str], torch.Tensor] = {}
        """(layer, norm) → B = Σ_c t_c t_cᵀ / n_c over the closed classes, (p, p) float64 CPU."""
        self.reference: dict[tuple[int, str], torch.Tensor] = {}
        """(layer, norm) → r, (p,) float64 CPU."""
        self.open: dict[tuple[int, str], OpenSums] = {}
        self.slots: dict[int, ClassSlots] = {}
        self._rows = torch.empty(0, dtype=torch.long)
        self._local = torch.empty(0, dtype=torch.long)
        self._present = np.empty(0, dtype=np.int64)

    def begin_batch(self, batch: Any) -> None:
        """The batch's rows whose target is a counted class; each row's index among the
        batch's distinct classes, and their indices among all classes."""
        ids, defined = target_ids(batch.rows, [self.target_offset])
        position = np.searchsorted(self.classes.ids, ids[:, 0])
        position = np.minimum(position, len(self.classes) - 1)
        counted = defined[:, 0] & (self.classes.ids[position] == ids[:, 0])
        present, local = np.unique(position[counted], return_inverse=True)
        self._rows = torch.from_numpy(np.flatnonzero(counted))
        self._local = torch.from_numpy(local.reshape(-1).astype(np.int64))
        self._present = present.astype(np.int64)

    def _norms_of(self, layer: int) -> list[str]:
        return self.norms if layer < self.facts.num_layers else [OUTPUT]

    def _store(self, layer: int, width: int, device: torch.device) -> None:
        """Empty statistics of ``layer``, if it has none yet: moments on ``device``, the
        folded matrices and open sums on the CPU (an equal share of ``host_bytes`` for
        each layer and norm)."""
        if layer in self.slots:
            return
        self.slots[layer] = ClassSlots(self.classes)
        layer_norms = self.facts.num_layers * len(self.norms) + 1
        held = slots_in_memory(self.host_bytes, width, layer_norms)
        for norm in self._norms_of(layer):
            self.total[layer, norm] = Moments.empty(width, device)
            self.folded[layer, norm] = torch.zeros(width, width, dtype=torch.float64)
            self.open[layer, norm] = OpenSums(self.classes.n_open_at_most, width, held)

    def _prepare(
        self, key: tuple[int, str], transformed: torch.Tensor, plan: BatchPlan, local: torch.Tensor
    ) -> tuple[Any, ...]:
        """Everything one norm's merge needs, computed without changing anything."""
        reference = self.reference[key] if key in self.reference else transformed.mean(0).cpu()
        device = transformed.device
        sums = torch.zeros(
            len(self._present), transformed.shape[1], dtype=torch.float64, device=device
        )
        sums.index_add_(0, local.to(device), transformed - reference.to(device))
        sums = sums.cpu()
        return reference, Moments.of_rows(transformed), *self._fold(key, sums, plan, self._present)

    def _fold(
        self, key: tuple[int, str], sums: torch.Tensor, plan: BatchPlan, present: np.ndarray
    ) -> tuple[torch.Tensor, list[torch.Tensor], torch.Tensor]:
        """The contribution to B of the classes ``plan`` closes, given ``sums`` (about the
        reference) of the ``present`` classes' new rows; the blocks to grow; ``sums``."""
        closing = sums[plan.closing]
        held = plan.closing_slots >= 0
        closing[torch.from_numpy(held)] += self.open[key].gather(plan.closing_slots[held])
        sizes = torch.from_numpy(self.classes.sizes[present[plan.closing]])
        contribution = closing.T @ (closing / sizes[:, None])
        grown = self.open[key].new_blocks(self.open[key].blocks_for(plan.occupied))
        return contribution, grown, sums

    def _commit(self, layer: int, prepared: list[tuple[Any, ...]], plan: BatchPlan) -> None:
        """Merge what ``_prepare`` or ``_shifted`` computed for each norm of ``layer``."""
        count = self.open[layer, prepared[0][0]].blocks_for(plan.occupied)
        for norm, (reference, moments, contribution, grown, sums) in prepared:
            key = (layer, norm)
            self.reference[key] = reference
            self.total[key].merge_(moments)
            self.folded[key] += contribution
            freed = plan.closing_slots[plan.closing_slots >= 0]
            self.open[key].merge_(grown, freed, plan.staying_slots, sums[plan.staying], count)

    def observe(self, layer: int, states: torch.Tensor) -> None:
        """Merge the counted rows of one batch of ``layer``; everything is computed (and
        every store allocated) before anything is merged, so an out-of-memory error
        changes nothing."""
        self._store(layer, states.shape[1], states.device)
        if len(self._rows) == 0:
            return
        features = states[self._rows.to(states.device)].to(torch.float64)
        batch_counts = np.bincount(self._local.numpy(), minlength=len(self._present))
        plan = self.slots[layer].plan(self._present, batch_counts)
        prepared = [
            (
                norm,
                self._prepare(
                    (layer, norm), normalized(features, norm, self.facts), plan, self._local
                ),
            )
            for norm in self._norms_of(layer)
        ]
        self._commit(layer, prepared, plan)
        self.slots[layer].apply(self._present, plan)

    def merge_(self, other: SeparationFuzziness) -> None:
        """Merge another shard's statistics (rows of other sequences, the same classes).

        Its classes that closed are in its B about its reference r′; moved to ours, r,
        with δ = r′ − r and T′, N′ the sum (about r′) and rows of those classes:
        B += B′ + T′δᵀ + δT′ᵀ + N′δδᵀ. Its open classes' sums, moved by n′_c δ, are merged
        as a batch's class sums are: the classes they complete fold into B.
        """
        for layer, theirs in other.slots.items():
            norms = [norm for norm in self._norms_of(layer) if (layer, norm) in other.reference]
            if not norms:
                continue
            self._store(layer, len(other.reference[layer, norms[0]]), torch.device("cpu"))
            ours = self.slots[layer]
            closed = np.flatnonzero(theirs.seen == theirs.sizes)
            if (ours.seen[closed] > 0).any():
                raise LayerlawsError(
                    "two shards of the pass showed rows of the same fuzziness class in full; "
                    "the shards must hold different sequences"
                )
            present = np.flatnonzero((theirs.seen > 0) & (theirs.seen < theirs.sizes))
            plan = ours.plan(present, theirs.seen[present])
            prepared = [
                (norm, self._shifted((layer, norm), other, theirs.slot[present], plan, present))
                for norm in norms
            ]
            self._commit(layer, prepared, plan)
            ours.apply(present, plan)
            ours.seen[closed] = ours.sizes[closed]

    def _shifted(
        self,
        key: tuple[int, str],
        other: SeparationFuzziness,
        slots: np.ndarray,
        plan: BatchPlan,
        present: np.ndarray,
    ) -> tuple[Any, ...]:
        """What ``_commit`` merges of ``other``'s statistics of ``key``, moved to our
        reference (ours, or theirs when we have none)."""
        theirs = other.reference[key]
        reference = self.reference.get(key, theirs)
        delta = theirs - reference
        total = other.total[key].to("cpu")
        open_sums = other.open[key].gather(slots)
        seen = torch.from_numpy(other.slots[key[0]].seen[present]).to(torch.float64)
        closed_sum = total.n * (total.mean - theirs) - open_sums.sum(0)
        closed_rows = total.n - float(seen.sum())
        folded = (
            other.folded[key]
            + torch.outer(closed_sum, delta)
            + torch.outer(delta, closed_sum)
            + closed_rows * torch.outer(delta, delta)
        )
        contribution, grown, sums = self._fold(
            key, open_sums + seen[:, None] * delta, plan, present
        )
        return reference, total, folded + contribution, grown, sums

    @property
    def held_sums(self) -> int:
        """Class sums held now, over every layer and norm."""
        return sum(sums.held for sums in self.open.values())

    @property
    def spilled_sums(self) -> int:
        """Of ``held_sums``, those in spill files."""
        return sum(sums.spilled for sums in self.open.values())

    def table(self, cutoff: float = DEFAULT_CUTOFF) -> pl.DataFrame:
        """``layer`` (0…L), ``norm``, ``fuzziness``, ``n_classes``, ``n_rows``; layer L
        under every norm. A LayerlawsError when the pass did not show every row of every
        class."""
        if not all(slots.complete() for slots in self.slots.values()):
            raise LayerlawsError(
                "the pass showed fewer rows of the fuzziness classes than the tokens table holds"
            )
        records = []
        for layer in range(self.facts.num_layers + 1):
            for norm in self.norms:
                key = (layer, norm if layer < self.facts.num_layers else OUTPUT)
                records.append(
                    {
                        "layer": layer,
                        "norm": norm,
                        "fuzziness": fuzziness(
                            self.total[key], self.folded[key], self.reference[key], cutoff
                        ),
                        "n_classes": len(self.classes),
                        "n_rows": self.total[key].n,
                    }
                )
        return pl.DataFrame(records, schema=FUZZINESS_SCHEMA)
