"""The representation geometry of every layer, streamed from the model pass: a named
observer (``layerlaws.forward.observers``) that adds up float64 sums on each layer's device
and turns them into one table row per layer. Each quantity's formula, range, reference and
where the project differs are in docs/numerics.md ("Representation geometry").

What each layer's rows x (its text tokens' states, d wide) add up to:

- n, Σx and the uncentred second moment Σxxᵀ, from which at table time (eigenvalues by
  ``numpy.linalg.eigvalsh`` in float64; ``layerlaws.geometry.spectra``):
  ``effective_rank``, RankMe (Garrido et al. 2023, §3) of the matrix Z of all rows, as
  theirs uncentred: the singular values of Z are √λ(Σxxᵀ);
  ``alpha_req``, α-ReQ's power-law exponent (Agrawal et al. 2022, the decay coefficient
  α) of the eigenvalues of the covariance (Σxxᵀ − n x̄x̄ᵀ) / (n − 1), as theirs centred;
  ``dataset_entropy`` under ``dataset_rows: tokens``, the Rényi entropy of Σxxᵀ's spectrum.
- per text (its tokens are one batch row, in position order), on the device while the
  batch passes (``layerlaws.geometry.prompts``): Skean et al.'s (2025, §3)
  ``prompt_entropy`` and ``curvature`` of its states (by default normalised per text as
  the authors' released code does), each summed over the texts that have one with their
  count, the table giving the mean over texts; and the text's mean state, a row of the
  ``dataset_entropy``'s matrix under ``dataset_rows: texts`` (the default, Skean et al.'s):
  the rows themselves while there are at most d of them (the Gram matrix ZZᵀ is the smaller,
  and the authors clip its negative entries), then their second moment ZᵀZ.
- Σ x/|x| and, per text, |Σ_text x/|x||² and its tokens squared, for the ``anisotropy``:
  the mean cosine between the states of two tokens of different texts (Ethayarajh 2019,
  'Adjusting for Anisotropy': words drawn uniformly from different contexts),
  (|Σu|² − Σ_t |Σ_{i∈t} u_i|²) / (n² − Σ_t n_t²) with u = x/|x|; under ``anisotropy_pairs:
  all``, over every pair i ≠ j, those of one text included, (|Σu|² − n) / (n(n − 1)).
- per compared pair of layers l < m, the cross-moment Σ x_l x_mᵀ: ``cka_previous`` (l − 1
  against l) and ``cka_last`` (l against L; without ``cka_against_last`` not measured
  and not a column) are linear CKA (Kornblith et al. 2019, 'Comparing Similarity
  Structures') of the centred states. Layer m's states meet layer l's kept states of the
  same rows: the previous layer's are kept until the next arrives and, against the last,
  every layer's until the last arrives.

Every moment is of the states shifted by a fixed shift c per layer (the mean state of the
first batch it sees, rounded to the product dtype): y = x − c, so that a float32 product
rounds relative to the states' spread, not to the offset they share. What is summed is Σy,
Σyyᵀ and Σ y_l y_mᵀ; at table time Σxxᵀ = Σyyᵀ + (Σy)cᵀ + c(Σy)ᵀ + n ccᵀ, the centred
second moment is Σyyᵀ − (Σy)(Σy)ᵀ/n and the centred cross-moment Σ y_l y_mᵀ −
(Σy_l)(Σy_m)ᵀ/n, in float64. The products are made in ``product_dtype``, float32 by
default, and added into float64 sums, but for the second moment of layer 0 and of each
layer's batches until it has seen d rows, made in float64: float32 products leave
eigenvalues of about 2⁻²⁴‖Y‖² where a layer's states span fewer than d dimensions (fewer
rows than d, or at layer 0 fewer distinct tokens than d), whose square roots RankMe would
add up; past d rows a deeper layer's states span all d, unless its texts repeat one
another. The texts' normalisation is made in the product dtype from the shifted states,
their steps' lengths, dot products and angles in float64.

Memory and time are in ``layerlaws.geometry.costs``. Everything is merged in float64 as
sums, so shards merge by adding (``merge_``) and a pass resumes from its
``progress_attributes``. A state holding NaN makes its layer's quantities NaN (and the
CKA of the pairs it is in); a zero state makes the anisotropy NaN. A layer with no rows
(a pass over no text tokens) has a row of NaN with ``n_rows`` 0.

``observe`` is atomic: everything that allocates (the layer's accumulators when first
seen, the shifted states, the texts' padded states and per-text quantities, one d × d
matrix that each product is made in before it is added) is made before anything is added,
and the adding allocates nothing. After an out-of-memory split the halves' rows are looked
up in the kept states of the whole batch (by row number), which stay until each row's last
comparison is made.
"""

from __future__ import annotations

from dataclasses import dataclass, fields
from typing import Any

import numpy as np
import polars as pl
import torch

from layerlaws.core.dtypes import torch_dtype
from layerlaws.core.errors import LayerlawsError
from layerlaws.core.products import add_gram_
from layerlaws.forward.model_pass import Batch
from layerlaws.geometry import costs, prompts
from layerlaws.geometry.settings import GeometrySettings
from layerlaws.geometry.spectra import (
    effective_rank,
    linear_cka,
    power_law_decay,
    spectral_entropy,
)

QUANTITIES = (
    "effective_rank",
    "alpha_req",
    "dataset_entropy",
    "prompt_entropy",
    "curvature",
    "anisotropy",
    "cka_previous",
    "cka_last",
)
"""The table's measured columns (see the module docstring), float64."""

TEXT_SUMS = (
    "texts",
    "entropy_texts",
    "entropy_sum",
    "curvature_texts",
    "curvature_sum",
    "squared_lengths",
    "text_unit_sums",
)
"""The entries of ``LayerSums.texts``: texts; texts with a prompt entropy and the sum of
theirs (nats); texts counted in the curvature and the sum of theirs (radians); Σ_t n_t²
(tokens per text, squared); Σ_t |Σ_{i∈t} x_i/|x_i||²."""


@dataclass
class LayerSums:
    """What one layer's rows add up to, float64 tensors on the layer's device."""

    n: int
    """Rows (text tokens) observed."""
    shift: torch.Tensor
    """c, (d,): the layer's fixed shift (its first batch's mean state, in the product
    dtype's precision)."""
    shifted_sum: torch.Tensor
    """Σy, (d,), y = x − c."""
    second: torch.Tensor
    """Σyyᵀ, (d, d)."""
    unit_sum: torch.Tensor
    """Σ x/|x|, (d,)."""
    texts: torch.Tensor
    """(len(TEXT_SUMS),): the per-text sums."""
    text_rows: torch.Tensor | None
    """(d, d): the dataset entropy's rows, the texts' mean states, while there are at most d
    of them (the first ``texts`` rows), then their second moment ZᵀZ; None unless
    ``dataset_rows: texts``."""

    @classmethod
    def empty(cls, shift: torch.Tensor, text_rows: bool) -> LayerSums:
        """No rows yet, shifted by ``shift`` (d,) float64 (on the layer's device)."""
        width = len(shift)

        def zeros(*shape: int) -> torch.Tensor:
            return shift.new_zeros(*shape)

        rows = zeros(width, width) if text_rows else None
        return cls(
            0, shift, zeros(width), zeros(width, width), zeros(width), zeros(len(TEXT_SUMS)), rows
        )

    def uncentred(self) -> torch.Tensor:
        """Σxxᵀ = Σyyᵀ + (Σy)cᵀ + c(Σy)ᵀ + n ccᵀ, (d, d)."""
        moment = self.second.clone()
        moment.addr_(self.shifted_sum, self.shift).addr_(self.shift, self.shifted_sum)
        return moment.addr_(self.shift, self.shift, alpha=self.n)

    def scatter(self) -> torch.Tensor:
        """The centred second moment Σ(x − x̄)(x − x̄)ᵀ = Σyyᵀ − (Σy)(Σy)ᵀ/n, (d, d)."""
        return self.second - torch.outer(self.shifted_sum, self.shifted_sum) / self.n

    def text_sum(self, name: str) -> torch.Tensor:
        """The per-text sum ``name`` (of ``TEXT_SUMS``), a 0-d view."""
        return self.texts[TEXT_SUMS.index(name)]

    @property
    def row_count(self) -> int:
        """Rows of the dataset entropy's matrix so far: one per text."""
        return int(self.text_sum("texts"))

    def tensors(self) -> dict[str, torch.Tensor]:
        """The tensors by field name (``text_rows`` only when held)."""
        return {
            field.name: getattr(self, field.name)
            for field in fields(self)
            if isinstance(getattr(self, field.name), torch.Tensor)
        }

    def add_(self, other: LayerSums) -> None:
        """Add ``other``'s sums (another shard's rows, shifted by its own c) in place, on
        our device."""
        theirs = other.to(self.shift.device)
        offset = theirs.shift - self.shift
        if self.text_rows is not None:
            rows = _merged_rows(self, theirs)
        _reshift_(theirs.second, theirs.shifted_sum, offset, theirs.shifted_sum, offset, theirs.n)
        theirs.shifted_sum.add_(offset, alpha=theirs.n)
        self.n += theirs.n
        for name in ("shifted_sum", "second", "unit_sum", "texts"):
            getattr(self, name).add_(getattr(theirs, name))
        if self.text_rows is not None:
            self.text_rows.copy_(rows)

    def to(self, device: torch.device | str) -> LayerSums:
        """A copy on ``device`` (a copy on ours too)."""
        moved = {name: tensor.to(device, copy=True) for name, tensor in self.tensors().items()}
        return LayerSums(**{"n": self.n, "text_rows": None, **moved})


def _reshift_(
    moment: torch.Tensor,
    first_sum: torch.Tensor,
    first_offset: torch.Tensor,
    second_sum: torch.Tensor,
    second_offset: torch.Tensor,
    n: int,
) -> None:
    """Turn ``moment`` = Σ y_f y_sᵀ (d, d) of states shifted by c into the same moment of the
    states shifted by c − δ (δ = ``*_offset``, y′ = y + δ) in place: Σ y′_f y′_sᵀ = Σ y_f y_sᵀ
    + (Σ y_f) δ_sᵀ + δ_f (Σ y_s)ᵀ + n δ_f δ_sᵀ, from the sums Σy before the shift."""
    moment.addr_(first_sum, second_offset).addr_(first_offset, second_sum)
    moment.addr_(first_offset, second_offset, alpha=n)


def _merged_rows(ours: LayerSums, theirs: LayerSums) -> torch.Tensor:
    """``ours.text_rows`` with ``theirs`` added: the rows of both while there are at most d,
    else their second moments' sum; a new (d, d) tensor on our device."""
    width, count = len(ours.shift), ours.row_count + theirs.row_count
    their_rows = theirs.text_rows
    if count <= width:
        merged = ours.text_rows.clone()
        merged[ours.row_count : count] = their_rows[: theirs.row_count]
        return merged
    return _rows_moment(ours.text_rows, ours.row_count) + _rows_moment(their_rows, theirs.row_count)


def _rows_moment(text_rows: torch.Tensor, count: int) -> torch.Tensor:
    """ZᵀZ of the dataset entropy's rows Z held in ``text_rows`` (d, d) after ``count``
    rows (the rows themselves while count ≤ d, else ZᵀZ already); a new tensor."""
    if count > len(text_rows):
        return text_rows.clone()
    rows = text_rows[:count]
    return rows.T @ rows


@dataclass
class _Kept:
    """A layer's states of a batch, kept until later layers are compared with them."""

    rows: np.ndarray
    """(n,) int64: the row numbers of the states (``Batch.row_numbers``)."""
    states: torch.Tensor
    """(n, d): y = x − c, in the product dtype, on the layer's device."""
    pending: np.ndarray
    """(n,) bool: the rows whose last comparison is still to come."""


@dataclass(frozen=True)
class _TextSums:
    """One layer's per-text sums of a batch, made before any is added."""

    sums: torch.Tensor
    """(len(TEXT_SUMS),) float64."""
    unit_sum: torch.Tensor
    """(d,) float64: Σ x/|x| over the batch's rows."""
    rows: torch.Tensor | None
    """(B, d) float64: the texts' mean states (None unless ``dataset_rows: texts``)."""
    moment: torch.Tensor | None
    """(d, d) float64: what ``LayerSums.text_rows`` becomes once these rows make more than d
    (None while they do not)."""


class GeometryObserver(costs.GeometryCosts):
    """The representation geometry of layers 0..``num_layers``, streamed from a model
    pass (a named observer, ``layerlaws.forward.observers``); ``table()`` gives one row
    per layer. See the module docstring."""

    progress_attributes = ("layers", "cross")

    def __init__(self, settings: GeometrySettings, num_layers: int) -> None:
        self.settings, self.num_layers = settings, num_layers
        self.layers: dict[int, LayerSums] = {}
        """Layer → its sums."""
        self.cross: dict[tuple[int, int], torch.Tensor] = {}
        """(l, m) → Σ y_l y_mᵀ of the layers' shifted states, (d, d) float64 on layer m's
        device."""
        pairs = settings.layer_pairs(num_layers)
        self._earlier = {
            layer: [first for first, later in pairs if later == layer]
            for layer in range(num_layers + 1)
        }
        """Layer m → the layers l whose kept states are compared with m's."""
        self._last_use = {
            layer: max(later for first, later in pairs if first == layer)
            for layer in range(num_layers)
        }
        """Layer l → the last layer compared with it."""
        self._kept: dict[int, _Kept] = {}
        self._rows = np.empty(0, dtype=np.int64)
        self._texts: prompts.TextLayout | None = None
        self._on_device: dict[torch.device, prompts.TextLayout] = {}

    def begin_batch(self, batch: Batch) -> None:
        """The rows that follow; kept states that do not hold all of them (an earlier
        batch's) are dropped."""
        self._rows = np.asarray(batch.row_numbers, dtype=np.int64)
        self._texts = prompts.TextLayout.of(batch)
        self._on_device.clear()
        stale = [
            layer for layer, kept in self._kept.items() if not np.isin(self._rows, kept.rows).all()
        ]
        for layer in stale:
            del self._kept[layer]

    def observe(self, layer: int, states: torch.Tensor) -> None:
        """Add the batch's rows of ``layer`` (n, d); atomic (see the module docstring)."""
        if not 0 <= layer <= self.num_layers:
            raise LayerlawsError(
                f"the geometry observer measures layers 0..{self.num_layers}; it was shown "
                f"layer {layer}"
            )
        if len(states) != len(self._rows):
            raise LayerlawsError(
                f"layer {layer} brought {len(states)} rows, but its batch has {len(self._rows)}"
            )
        if len(states) == 0:
            return
        # Prepared: everything that allocates.
        device, width = states.device, states.shape[1]
        exact = states.to(torch.float64)
        sums = self._sums(layer, exact)
        product_dtype = torch_dtype(self.settings.product_dtype)
        kept = states.to(product_dtype) - sums.shift.to(product_dtype)
        exact_moment = layer == 0 or sums.n < width
        moment_rows = exact - sums.shift if exact_moment else kept
        earlier = [
            (self._cross(first, layer, width, device), *self._kept_rows(first))
            for first in self._earlier[layer]
        ]
        product = kept.new_empty(width, width)
        second = moment_rows.new_zeros(width, width)
        add_gram_(second, moment_rows)
        shifted_sum = moment_rows.sum(dim=0, dtype=torch.float64)
        texts = self._text_sums(exact, kept, sums)
        # Merged: nothing below allocates on the device.
        sums.n += len(states)
        sums.shifted_sum.add_(shifted_sum)
        sums.second.add_(second)
        self._add_text_sums_(sums, texts)
        for matrix, previous, _ in earlier:
            matrix.add_(torch.mm(previous.T, kept, out=product))
        self._compared(layer, [where for _, _, where in earlier])
        if layer < self.num_layers:
            self._kept[layer] = _Kept(self._rows, kept, np.ones(len(states), dtype=bool))

    def _sums(self, layer: int, states: torch.Tensor) -> LayerSums:
        """The layer's sums, created (zero, shifted by the mean of ``states`` (n, d) float64,
        rounded to the product dtype) when first needed."""
        if layer not in self.layers:
            mean = states.mean(dim=0).to(torch_dtype(self.settings.product_dtype))
            self.layers[layer] = LayerSums.empty(
                mean.to(torch.float64), self.settings.dataset_rows == "texts"
            )
        sums = self.layers[layer]
        if len(sums.shift) != states.shape[1]:
            raise LayerlawsError(
                f"layer {layer}'s states are {states.shape[1]} wide, but its earlier ones were "
                f"{len(sums.shift)}"
            )
        return sums

    def _cross(self, first: int, layer: int, width: int, device: torch.device) -> torch.Tensor:
        """The cross-moment of (``first``, ``layer``), created (zero) when first needed."""
        if (first, layer) not in self.cross:
            self.cross[first, layer] = torch.zeros(width, width, dtype=torch.float64, device=device)
        return self.cross[first, layer]

    def _kept_rows(self, layer: int) -> tuple[torch.Tensor, np.ndarray | None]:
        """``layer``'s kept states of the current rows, and where those rows are among
        the kept ones (None: all of them, in order)."""
        kept = self._kept.get(layer)
        if kept is None:
            raise LayerlawsError(
                f"the geometry observer holds no states of layer {layer} for this batch: a "
                f"pass shows every layer of a batch in order"
            )
        if np.array_equal(kept.rows, self._rows):
            return kept.states, None
        order = np.argsort(kept.rows)
        found = np.minimum(np.searchsorted(kept.rows[order], self._rows), len(order) - 1)
        where = order[found]
        if not np.array_equal(kept.rows[where], self._rows):
            raise LayerlawsError(
                f"the geometry observer kept other rows of layer {layer} than this batch's"
            )
        return kept.states[torch.from_numpy(where).to(kept.states.device)], where

    def _compared(self, layer: int, places: list[np.ndarray | None]) -> None:
        """Mark the current rows of the layers compared with ``layer`` for the last time as
        done; drop a layer's kept states when all its rows are."""
        for first, where in zip(self._earlier[layer], places, strict=True):
            if self._last_use[first] != layer:
                continue
            kept = self._kept[first]
            kept.pending[slice(None) if where is None else where] = False
            if not kept.pending.any():
                del self._kept[first]

    def _text_sums(self, exact: torch.Tensor, kept: torch.Tensor, sums: LayerSums) -> _TextSums:
        """The batch's per-text sums (``TEXT_SUMS``), unit-vector sum and dataset rows, from
        its rows ``exact`` (n, d) float64 and ``kept`` (n, d), shifted by the layer's c, in
        the product dtype (see ``layerlaws.geometry.prompts``); allocates, adds nothing."""
        device, settings = exact.device, self.settings
        if device not in self._on_device:
            self._on_device[device] = self._texts.to(device)
        layout = self._on_device[device]
        length = layout.length.to(torch.float64)
        if settings.prompt_states == "normalized":
            normalized = prompts.normalized(kept, layout)
            gram_rows, step_rows, pooled = normalized, normalized, normalized
        else:
            gram_rows, step_rows, pooled = exact.to(kept.dtype), kept, exact
        entropy, measured = prompts.prompt_entropies(
            gram_rows,
            layout,
            settings.entropy_alpha,
            clip=settings.prompt_states == "normalized",
        )
        curvature, counted = prompts.curvatures(
            step_rows, layout, absolute=settings.curvature_angle == "absolute"
        )
        text_units = layout.sums(exact / torch.linalg.vector_norm(exact, dim=1, keepdim=True))
        values = [
            length.new_tensor(float(len(length))),
            measured.sum().to(torch.float64),
            torch.where(measured, entropy, 0.0).sum(),
            counted.sum().to(torch.float64),
            torch.where(counted, curvature, 0.0).sum(),
            (length**2).sum(),
            (text_units**2).sum(),
        ]
        rows = moment = None
        if sums.text_rows is not None:
            rows = layout.sums(pooled).to(torch.float64) / length[:, None]
            if sums.row_count + len(rows) > len(sums.shift):
                moment = _rows_moment(sums.text_rows, sums.row_count).addmm_(rows.T, rows)
        return _TextSums(torch.stack(values), text_units.sum(dim=0), rows, moment)

    @staticmethod
    def _add_text_sums_(sums: LayerSums, texts: _TextSums) -> None:
        """Add a batch's per-text sums (``_text_sums``) to the layer's; allocates nothing."""
        if texts.moment is not None:
            sums.text_rows.copy_(texts.moment)
        elif texts.rows is not None:
            sums.text_rows[sums.row_count : sums.row_count + len(texts.rows)] = texts.rows
        sums.texts.add_(texts.sums)
        sums.unit_sum.add_(texts.unit_sum)

    def merge_(self, other: GeometryObserver) -> None:
        """Add ``other``'s sums (a shard of other texts, an observer built alike, its
        moments shifted by its own c: turned to ours first)."""
        for (first, second), theirs in other.cross.items():
            if (first, second) not in self.cross:
                self.cross[first, second] = theirs.clone()
                continue
            ours = self.cross[first, second]
            moment = theirs.to(ours.device, copy=True)
            sums = [other.layers[first].to(ours.device), other.layers[second].to(ours.device)]
            offsets = [
                part.shift - self.layers[layer].shift.to(ours.device)
                for part, layer in zip(sums, (first, second), strict=True)
            ]
            _reshift_(
                moment, sums[0].shifted_sum, offsets[0], sums[1].shifted_sum, offsets[1], sums[0].n
            )
            ours.add_(moment)
        for layer, theirs in other.layers.items():
            if layer in self.layers:
                self.layers[layer].add_(theirs)
            else:
                self.layers[layer] = theirs.to(theirs.shift.device)

    def table(self) -> pl.DataFrame:
        """One row per layer 0..L: ``layer``, ``n_rows``, ``n_texts`` and the quantities
        (``QUANTITIES``, float64; without ``cka_last`` unless ``cka_against_last``)."""
        sums = {layer: part.to("cpu") for layer, part in self.layers.items() if part.n > 0}
        rows = [self._row(layer, sums) for layer in range(self.num_layers + 1)]
        schema = {"layer": pl.Int64, "n_rows": pl.Int64, "n_texts": pl.Int64}
        schema |= {name: pl.Float64 for name in QUANTITIES}
        table = pl.DataFrame(rows, schema=schema, orient="row")
        return table if self.settings.cka_against_last else table.drop("cka_last")

    def _row(self, layer: int, sums: dict[int, LayerSums]) -> list[Any]:
        if layer not in sums:
            return [layer, 0, 0, *[float("nan")] * len(QUANTITIES)]
        part = sums[layer]
        n, settings = part.n, self.settings
        second, scatter = part.uncentred().numpy(), part.scatter().numpy()
        text = dict(zip(TEXT_SUMS, part.texts.tolist(), strict=True))
        with np.errstate(invalid="ignore", divide="ignore"):
            values = [
                effective_rank(second, n, settings.rankme_epsilon),
                power_law_decay(scatter / (n - 1), n, settings.alpha_req_ranks),
                spectral_entropy(
                    self._dataset_matrix(part),
                    settings.entropy_alpha,
                ),
                text["entropy_sum"] / text["entropy_texts"],
                text["curvature_sum"] / text["curvature_texts"],
                self._anisotropy(part, text),
                self._cka(layer - 1, layer, sums),
                self._cka(layer, self.num_layers, sums),
            ]
        return [layer, n, int(text["texts"]), *[float(value) for value in values]]

    def _dataset_matrix(self, part: LayerSums) -> np.ndarray:
        """The matrix whose spectrum the dataset entropy is of (float64): the texts' rows'
        Gram matrix ZZᵀ while they are at most d, else ZᵀZ, its negative entries set to 0
        under ``prompt_states: normalized``; the second moment under ``dataset_rows:
        tokens``."""
        if part.text_rows is None:
            return part.uncentred().numpy()
        count = part.row_count
        rows = part.text_rows.numpy()
        matrix = rows[:count] @ rows[:count].T if count <= len(rows) else rows
        return matrix.clip(min=0) if self.settings.prompt_states == "normalized" else matrix

    def _anisotropy(self, part: LayerSums, text: dict[str, float]) -> float:
        """The mean cosine between token states of different texts (or, under
        ``anisotropy_pairs: all``, of every pair of tokens)."""
        unit, n = part.unit_sum.numpy(), part.n
        if self.settings.anisotropy_pairs == "all":
            return (unit @ unit - n) / (n * (n - 1))
        return (unit @ unit - text["text_unit_sums"]) / (n * n - text["squared_lengths"])

    def _cka(self, first: int, second: int, sums: dict[int, LayerSums]) -> float:
        """Linear CKA of layers ``first`` and ``second`` (1 for a layer with itself); NaN
        when the pair is not measured."""
        if first == second and first in sums:
            return linear_cka(*[sums[first].scatter().numpy()] * 3)
        if (first, second) not in self.cross or first not in sums or second not in sums:
            return float("nan")
        x, y = sums[first], sums[second]
        if x.n != y.n:
            raise LayerlawsError(
                f"layers {first} and {second} were shown {x.n} and {y.n} rows; the geometry "
                f"observer compares the same rows of every layer"
            )
        cross = self.cross[first, second].cpu()
        centred = cross - torch.outer(x.shifted_sum, y.shifted_sum) / x.n
        return linear_cka(centred.numpy(), x.scatter().numpy(), y.scatter().numpy())
