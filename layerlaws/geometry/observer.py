"""The representation geometry of every layer, streamed from the model pass: a named
observer (``layerlaws.forward.observers``) that adds up float64 sums on each layer's device
and turns them into one table row per layer.

What each layer's rows x (its text tokens' states, d wide) add up to:

- n, Σx and the uncentred second moment Σxxᵀ, from which at table time (eigenvalues by
  ``numpy.linalg.eigvalsh`` in float64; ``layerlaws.geometry.spectra``):
  ``effective_rank``, RankMe (Garrido et al. 2023, §3) of the matrix Z of all rows, as
  theirs uncentred: the singular values of Z are √λ(Σxxᵀ);
  ``alpha_req``, α-ReQ's power-law exponent (Agrawal et al. 2022, the decay coefficient
  α) of the eigenvalues of the covariance (Σxxᵀ − n x̄x̄ᵀ) / (n − 1), as theirs centred;
  ``dataset_entropy`` under ``dataset_rows: tokens``, the Rényi entropy of Σxxᵀ's spectrum
  (the Gram matrix ZZᵀ of the rows has the same nonzero eigenvalues).
- per text (its tokens are one batch row, in position order), on the device while the
  batch passes: Skean et al.'s (2025, §3) ``prompt_entropy``, the Rényi entropy of the
  text's uncentred Gram matrix ZZᵀ (or ZᵀZ, whichever is smaller: the same nonzero
  eigenvalues), and ``curvature``, the mean angle arccos(v_t·v_{t+1} / |v_t||v_{t+1}|)
  between its consecutive steps v_t = x_{t+1} − x_t (radians; an angle with a zero step
  is undefined and left out, and a text with no angle counts for nothing); each summed
  over texts with its count, the table giving the mean over texts. And Σ m mᵀ of the
  texts' mean states m: under ``dataset_rows: texts`` (the default) the
  ``dataset_entropy`` is that of Skean et al., on the Gram matrix of the mean-pooled
  texts, uncentred, whose nonzero eigenvalues are Σ m mᵀ's.
- Σ x/|x|, for the ``anisotropy``: the mean cosine between distinct token states (over all
  pairs i ≠ j of the dataset's tokens, those of one text included; Ethayarajh 2019,
  'Adjusting for Anisotropy', samples such pairs), (|Σu|² − n) / (n(n − 1)) with u = x/|x|.
- per compared pair of layers l < m, the cross-moment Σ x_l x_mᵀ: ``cka_previous`` (l − 1
  against l) and ``cka_last`` (l against L; without ``cka_against_last`` not measured
  and not a column) are linear CKA (Kornblith et al. 2019, 'Comparing Similarity
  Structures') of the centred states. Layer m's states meet layer l's kept states of the
  same rows: the previous layer's are kept until the next arrives and, against the last,
  every layer's until the last arrives.

Each batch's matrix products (of its states, the texts' Gram matrices and the sums over
the batch) are made in ``product_dtype``, float32 by default, and added into float64
sums. The products of second and cross-moments are of the batch's states shifted by their
mean c, rounded to that dtype: Σ x_l x_mᵀ = Σ y_l y_mᵀ + (Σ y_l) c_mᵀ + c_l (Σ y_m)ᵀ
+ n c_l c_mᵀ with y = x − c, the last three terms in float64, so that float32 rounds
relative to the batch's spread, not to its mean (every quantity within 4e-7 of float64
products on SmolLM2's states). The steps of the curvature are made in float64 from the
float32 differences: arccos near π turns the rounding of a cosine into its square root.

Memory and time are in ``layerlaws.geometry.costs`` (17.3 GB of accumulators at d = 4,096
and L = 32, 540 kB of kept states per batch token in float32). Everything is merged in
float64 as sums, so shards merge by adding (``merge_``) and a pass resumes from its
``progress_attributes``. A state holding NaN makes its layer's quantities NaN (and the
CKA of the pairs it is in); a zero state makes the anisotropy NaN. A layer with no rows
(a pass over no text tokens) has a row of NaN with ``n_rows`` 0.

``observe`` is atomic: everything that allocates (the layer's accumulators when first
seen, the shifted states, the texts' padded states, one d × d matrix that each product
is made in before it is added) is made before anything is added, and the adding
allocates nothing. After an out-of-memory split the halves' rows are looked up in the
kept states of the whole batch (by row number), which stay until each row's last
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
from layerlaws.geometry import costs
from layerlaws.geometry.settings import GeometrySettings
from layerlaws.geometry.spectra import (
    effective_rank,
    linear_cka,
    power_law_decay,
    renyi_entropy,
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


@dataclass
class LayerSums:
    """What one layer's rows add up to, float64 tensors on the layer's device."""

    n: int
    """Rows (text tokens) observed."""
    sum: torch.Tensor
    """Σx, (d,)."""
    second: torch.Tensor
    """Σxxᵀ, uncentred, (d, d)."""
    unit_sum: torch.Tensor
    """Σ x/|x|, (d,)."""
    texts: torch.Tensor
    """(4,): texts, Σ of their prompt entropies (nats), texts with an angle, Σ of their
    curvatures (radians)."""
    text_means: torch.Tensor | None
    """Σ m mᵀ of the texts' mean states m, (d, d); None unless ``dataset_rows: texts``."""

    @classmethod
    def empty(cls, width: int, device: torch.device, text_means: bool) -> LayerSums:
        def zeros(*shape: int) -> torch.Tensor:
            return torch.zeros(*shape, dtype=torch.float64, device=device)

        means = zeros(width, width) if text_means else None
        return cls(0, zeros(width), zeros(width, width), zeros(width), zeros(4), means)

    def tensors(self) -> dict[str, torch.Tensor]:
        """The tensors by field name (``text_means`` only when held)."""
        return {
            field.name: getattr(self, field.name)
            for field in fields(self)
            if isinstance(getattr(self, field.name), torch.Tensor)
        }

    def add_(self, other: LayerSums) -> None:
        """Add ``other``'s sums (another shard's rows) in place, on our device."""
        self.n += other.n
        for name, tensor in self.tensors().items():
            tensor.add_(getattr(other, name).to(tensor.device))

    def to(self, device: torch.device | str) -> LayerSums:
        """A copy on ``device``."""
        moved = {name: tensor.to(device, copy=True) for name, tensor in self.tensors().items()}
        return LayerSums(**{"n": self.n, "text_means": None, **moved})


@dataclass(frozen=True)
class _Shifted:
    """A layer's batch states for the products: shifted by their mean (rounded to the
    product dtype), so that a float32 product rounds relative to their spread."""

    values: torch.Tensor
    """(n, d) in the product dtype: x − shift."""
    shift: torch.Tensor
    """(d,) float64: exactly what was subtracted."""
    total: torch.Tensor
    """(d,) float64: Σ values."""

    @classmethod
    def of(cls, states: torch.Tensor) -> _Shifted:
        """``states`` (n, d), in the product dtype, shifted by their mean."""
        shift = (states.sum(dim=0, dtype=torch.float64) / len(states)).to(states.dtype)
        values = states - shift
        return cls(values, shift.to(torch.float64), values.sum(dim=0, dtype=torch.float64))

    def rows(self, where: torch.Tensor) -> _Shifted:
        """The states of rows ``where`` (the same shift)."""
        values = self.values[where]
        return _Shifted(values, self.shift, values.sum(dim=0, dtype=torch.float64))


def _add_product_(
    moment: torch.Tensor, first: _Shifted, second: _Shifted, product: torch.Tensor
) -> None:
    """Add Σ x_f x_sᵀ to ``moment`` (d, d) float64 in place, from ``product`` = Σ y_f y_sᵀ
    of the shifted states y = x − c (product dtype, same rows): Σ x_f x_sᵀ = Σ y_f y_sᵀ
    + (Σ y_f) c_sᵀ + c_f (Σ y_s)ᵀ + n c_f c_sᵀ, the corrections in float64."""
    moment.add_(product)
    moment.addr_(first.total, second.shift)
    moment.addr_(first.shift, second.total)
    moment.addr_(first.shift, second.shift, alpha=len(first.values))


@dataclass
class _Kept:
    """A layer's states of a batch, kept until later layers are compared with them."""

    rows: np.ndarray
    """(n,) int64: the row numbers of the states (``Batch.row_numbers``)."""
    states: _Shifted
    """Shifted, in the product dtype, on the layer's device."""
    pending: np.ndarray
    """(n,) bool: the rows whose last comparison is still to come."""


@dataclass(frozen=True)
class _Texts:
    """Where a batch's rows go among its texts: text ``slot`` (0..B−1) and ``rank`` (its
    place by position in the text), and each text's ``length`` (rows)."""

    slot: torch.Tensor
    rank: torch.Tensor
    length: torch.Tensor
    longest: int

    @classmethod
    def of(cls, batch: Batch) -> _Texts:
        _, slot = np.unique(batch.batch_index.numpy(), return_inverse=True)
        slot = slot.reshape(-1)
        order = np.lexsort((batch.position_index.numpy(), slot))
        length = np.bincount(slot)
        start = np.concatenate([[0], np.cumsum(length)[:-1]])
        rank = np.empty(len(slot), dtype=np.int64)
        rank[order] = np.arange(len(slot)) - start[slot[order]]
        return cls(
            torch.from_numpy(slot),
            torch.from_numpy(rank),
            torch.from_numpy(length),
            int(length.max(initial=0)),
        )

    def to(self, device: torch.device) -> _Texts:
        return _Texts(
            self.slot.to(device), self.rank.to(device), self.length.to(device), self.longest
        )


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
        """(l, m) → Σ x_l x_mᵀ, uncentred, (d, d) float64 on layer m's device."""
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
        self._texts: _Texts | None = None
        self._on_device: dict[torch.device, _Texts] = {}

    def begin_batch(self, batch: Batch) -> None:
        """The rows that follow; kept states that do not hold all of them (an earlier
        batch's) are dropped."""
        self._rows = np.asarray(batch.row_numbers, dtype=np.int64)
        self._texts = _Texts.of(batch)
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
        device = states.device
        sums = self._sums(layer, states.shape[1], device)
        x = states.to(torch_dtype(self.settings.product_dtype))
        shifted = _Shifted.of(x)
        earlier = [
            (self._cross(first, layer, states.shape[1], device), *self._kept_rows(first))
            for first in self._earlier[layer]
        ]
        product = x.new_empty(states.shape[1], states.shape[1])
        norms = torch.linalg.vector_norm(x, dim=1, dtype=torch.float64)
        unit_sum = (x * norms.reciprocal().to(x.dtype)[:, None]).sum(dim=0, dtype=torch.float64)
        texts, means = self._text_sums(x)
        # Merged: nothing below allocates on the device.
        sums.n += len(x)
        sums.sum.add_(shifted.total).add_(shifted.shift, alpha=len(x))
        add_gram_(product.zero_(), shifted.values)
        _add_product_(sums.second, shifted, shifted, product)
        sums.unit_sum.add_(unit_sum)
        sums.texts.add_(texts)
        if sums.text_means is not None:
            add_gram_(sums.text_means, means)
        for matrix, previous, _ in earlier:
            torch.mm(previous.values.T, shifted.values, out=product)
            _add_product_(matrix, previous, shifted, product)
        self._compared(layer, [where for _, _, where in earlier])
        if layer < self.num_layers:
            self._kept[layer] = _Kept(self._rows, shifted, np.ones(len(states), dtype=bool))

    def _sums(self, layer: int, width: int, device: torch.device) -> LayerSums:
        """The layer's sums, created (zero) when first needed."""
        if layer not in self.layers:
            self.layers[layer] = LayerSums.empty(
                width, device, self.settings.dataset_rows == "texts"
            )
        sums = self.layers[layer]
        if len(sums.sum) != width:
            raise LayerlawsError(
                f"layer {layer}'s states are {width} wide, but its earlier ones were "
                f"{len(sums.sum)}"
            )
        return sums

    def _cross(self, first: int, layer: int, width: int, device: torch.device) -> torch.Tensor:
        """The cross-moment of (``first``, ``layer``), created (zero) when first needed."""
        if (first, layer) not in self.cross:
            self.cross[first, layer] = torch.zeros(width, width, dtype=torch.float64, device=device)
        return self.cross[first, layer]

    def _kept_rows(self, layer: int) -> tuple[_Shifted, np.ndarray | None]:
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
        return kept.states.rows(torch.from_numpy(where).to(kept.states.values.device)), where

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

    def _text_sums(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """The batch's per-text sums (``LayerSums.texts``), and its texts' mean states
        (B, d) float64, from its rows ``x`` (n, d) in the product dtype."""
        device = x.device
        if device not in self._on_device:
            self._on_device[device] = self._texts.to(device)
        texts = self._on_device[device]
        padded = x.new_zeros(len(texts.length), texts.longest, x.shape[1])
        padded[texts.slot, texts.rank] = x
        length = texts.length.to(torch.float64)
        curvature, curved = _curvatures(padded, texts.length)
        entropy = self._prompt_entropies(padded).sum()
        counts = torch.stack([length.new_tensor(float(len(length))), entropy])
        sums = torch.cat([counts, torch.stack([curved.sum().to(length.dtype), curvature.sum()])])
        return sums, padded.sum(dim=1, dtype=torch.float64) / length[:, None]

    def _prompt_entropies(self, padded: torch.Tensor) -> torch.Tensor:
        """Each text's prompt entropy (B,) float64 from its zero-padded states (B, T, d): of
        the Gram matrix (T ≤ d) or of ZᵀZ, and its eigenvalues, in the states' dtype; NaN
        for a text holding NaN or infinity."""
        narrow = padded.shape[1] <= padded.shape[2]
        gram = padded @ padded.mT if narrow else padded.mT @ padded
        finite = torch.isfinite(gram).all(dim=2).all(dim=1)
        gram = torch.where(finite[:, None, None], gram, 0.0)
        eigenvalues = torch.linalg.eigvalsh(gram).to(torch.float64)
        entropy = renyi_entropy(eigenvalues, self.settings.entropy_alpha)
        return torch.where(finite, entropy, torch.nan)

    def merge_(self, other: GeometryObserver) -> None:
        """Add ``other``'s sums (a shard of other texts, an observer built alike)."""
        for layer, theirs in other.layers.items():
            if layer in self.layers:
                self.layers[layer].add_(theirs)
            else:
                self.layers[layer] = theirs.to(theirs.sum.device)
        for pair, theirs in other.cross.items():
            if pair in self.cross:
                self.cross[pair].add_(theirs.to(self.cross[pair].device))
            else:
                self.cross[pair] = theirs.clone()

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
        second, scatter = part.second.numpy(), _scatter(part)
        texts = part.texts.numpy()
        unit = part.unit_sum.numpy()
        with np.errstate(invalid="ignore", divide="ignore"):
            values = [
                effective_rank(second, n, settings.rankme_epsilon),
                power_law_decay(scatter / (n - 1), n, settings.alpha_req_ranks),
                spectral_entropy(
                    second if part.text_means is None else part.text_means.numpy(),
                    settings.entropy_alpha,
                ),
                texts[1] / texts[0],
                texts[3] / texts[2],
                (unit @ unit - n) / (n * (n - 1)),
                self._cka(layer - 1, layer, sums),
                self._cka(layer, self.num_layers, sums),
            ]
        return [layer, n, int(texts[0]), *[float(value) for value in values]]

    def _cka(self, first: int, second: int, sums: dict[int, LayerSums]) -> float:
        """Linear CKA of layers ``first`` and ``second`` (1 for a layer with itself); NaN
        when the pair is not measured."""
        if first == second and first in sums:
            return linear_cka(*[_scatter(sums[first])] * 3)
        if (first, second) not in self.cross or first not in sums or second not in sums:
            return float("nan")
        x, y = sums[first], sums[second]
        if x.n != y.n:
            raise LayerlawsError(
                f"layers {first} and {second} were shown {x.n} and {y.n} rows; the geometry "
                f"observer compares the same rows of every layer"
            )
        cross = self.cross[first, second].cpu().numpy()
        centred = cross - np.outer(x.sum.numpy(), y.sum.numpy()) / x.n
        return linear_cka(centred, _scatter(x), _scatter(y))


def _scatter(sums: LayerSums) -> np.ndarray:
    """The centred second moment Σ(x − x̄)(x − x̄)ᵀ = Σxxᵀ − n x̄x̄ᵀ, (d, d) float64."""
    total = sums.sum.numpy()
    return sums.second.numpy() - np.outer(total, total) / sums.n


def _curvatures(padded: torch.Tensor, length: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Each text's mean angle between consecutive steps (B,) (0 for a text with no
    angle) and whether it has one (B,) bool, from its zero-padded states (B, T, d) and
    lengths (B,)."""
    steps = (padded[:, 1:] - padded[:, :-1]).to(torch.float64)
    size = torch.linalg.vector_norm(steps, dim=2)
    cosine = (steps[:, 1:] * steps[:, :-1]).sum(dim=2) / (size[:, 1:] * size[:, :-1])
    place = torch.arange(cosine.shape[1], device=padded.device)
    valid = (place < (length - 2)[:, None]) & (size[:, 1:] != 0) & (size[:, :-1] != 0)
    angles = torch.where(valid, torch.arccos(cosine.clamp(-1.0, 1.0)), 0.0)
    count = valid.sum(dim=1)
    curved = count > 0
    return torch.where(curved, angles.sum(dim=1) / count, 0.0), curved
