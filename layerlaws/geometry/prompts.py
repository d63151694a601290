"""Skean et al.'s (2025, §3) per-prompt quantities of one layer's batch, made on the device
while the batch passes: each text's states (raw, or normalised as the authors' released code
normalises them), its prompt entropy, its curvature, and its row of the dataset entropy's
matrix (its mean state).

A batch's rows (n, d) are its texts' tokens, text by text in position order (as
``layerlaws.forward.model_pass.Batch`` lays them out; ``TextLayout`` checks it): each text's
sums are small products with its rows (``TextLayout.sums``), its steps are differences of
consecutive rows, and only its Gram matrix needs the texts laid out side by side, zero-padded
(B, T, d).

The authors' released code (github.com/OFSkean/information_flow: ``normalize``,
``compute_entropy`` and ``compute_curvature`` in ``experiments/utils/metrics/
metric_functions.py``, applied per prompt by ``compute_per_forward_pass``, and to the
prompts' mean states by ``compute_on_concatenated_passes``), what ``prompt_states:
normalized`` and ``curvature_angle: absolute`` follow:

- each prompt's token states Z (T × d) are centred on the prompt's mean token state and each
  token is scaled to unit length;
- the entropy is that of the smaller of ZZᵀ (T ≤ d) and ZᵀZ, its negative entries set to 0,
  divided by its trace: the matrix-based entropy of its eigenvalues, those above 0;
- the curvature of a prompt is the mean over its T − 2 consecutive steps v_k = z_{k+1} − z_k
  of arccos(|v_{k+1}·v_k| / (|v_{k+1}| |v_k|)), in [0, π/2]; a pair with a zero step counts
  as angle 0, and a prompt with no pair (T < 3) as curvature 0.

Where this module differs: a token whose centred state is zero (the only token of a one-token
prompt) has no direction; the released code divides it by its zero length, and the NaN makes
the layer's mean NaN (or stops the run). Here it stays zero: it adds nothing to its prompt's
Gram matrix, and a prompt whose states are all zero has no prompt entropy and is left out of
its mean.

With ``prompt_states: raw`` the states are taken as they are (uncentred, their lengths kept)
and the Gram matrices are not clipped; with ``curvature_angle: signed`` the angle is
arccos(v_{k+1}·v_k / (|v_{k+1}| |v_k|)) in [0, π] (Hosseini & Fedorenko 2023's curvature),
an angle with a zero step is undefined and left out, and a prompt with no angle counts for
nothing.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch

from layerlaws.core.errors import LayerlawsError
from layerlaws.forward.model_pass import Batch
from layerlaws.geometry.spectra import renyi_entropy


@dataclass(frozen=True)
class TextLayout:
    """Where a batch's rows go among its texts: text ``slot`` (0..B−1) and ``rank`` (its
    place by position in the text) of each row, each text's ``length`` (rows), the
    ``longest``, and ``same_text`` (n − 2,) bool: whether rows i and i + 2 are of one text
    (so i + 1 is too, and steps i, i + 1 make an angle)."""

    slot: torch.Tensor
    rank: torch.Tensor
    length: torch.Tensor
    longest: int
    same_text: torch.Tensor

    @classmethod
    def of(cls, batch: Batch) -> TextLayout:
        _, slot = np.unique(batch.batch_index.numpy(), return_inverse=True)
        slot = slot.reshape(-1)
        position = batch.position_index.numpy()
        if len(slot) and not (
            (np.diff(slot) >= 0).all() and (np.diff(position)[np.diff(slot) == 0] > 0).all()
        ):
            raise LayerlawsError(
                "the geometry observer reads a batch's rows text by text in position order"
            )
        length = np.bincount(slot)
        start = np.concatenate([[0], np.cumsum(length)[:-1]]).astype(np.int64)
        return cls(
            torch.from_numpy(slot),
            torch.from_numpy(np.arange(len(slot)) - start[slot]),
            torch.from_numpy(length),
            int(length.max(initial=0)),
            torch.from_numpy(slot[2:] == slot[:-2]),
        )

    def to(self, device: torch.device) -> TextLayout:
        return TextLayout(
            self.slot.to(device),
            self.rank.to(device),
            self.length.to(device),
            self.longest,
            self.same_text.to(device),
        )

    def sums(self, rows: torch.Tensor) -> torch.Tensor:
        """Each text's sum of its rows (n, d): (B, d) in the rows' dtype."""
        return rows.new_zeros(len(self.length), rows.shape[1]).index_add_(0, self.slot, rows)

    def padded(self, rows: torch.Tensor) -> torch.Tensor:
        """The rows (n, d) laid out by text, (B, T, d) in their dtype, zero-padded."""
        padded = rows.new_zeros(len(self.length), self.longest, rows.shape[1])
        padded[self.slot, self.rank] = rows
        return padded


def normalized(rows: torch.Tensor, layout: TextLayout) -> torch.Tensor:
    """The rows (n, d) centred on their text's mean state and each scaled to unit length, in
    their dtype (the authors' ``normalize``, per text); a row whose centred state is zero
    stays zero. NaN propagates. Centring does not see an offset shared by every row, so
    rows shifted by one (``layerlaws.geometry.observer``) give the same result, rounded
    relative to their spread."""
    means = layout.sums(rows) / layout.length[:, None].to(rows.dtype)
    centred = rows - means[layout.slot]
    size = torch.linalg.vector_norm(centred, dim=1, keepdim=True)
    return centred.div_(size.clamp_(min=torch.finfo(rows.dtype).tiny))  # a zero row: 0 / tiny


def prompt_entropies(
    rows: torch.Tensor, layout: TextLayout, alpha: float, clip: bool
) -> tuple[torch.Tensor, torch.Tensor]:
    """Each text's matrix-based entropy (B,) float64 in nats, from its rows (n, d) in the
    dtype the products are made in: of ZZᵀ when the text has at most d tokens, else of ZᵀZ
    (the same nonzero eigenvalues, unless ``clip`` sets their negative entries to 0, as the
    authors' code does to whichever is smaller); and whether the text has one (B,) bool:
    not when its states are all zero. NaN for a text holding NaN or infinity."""
    states = layout.padded(rows)
    width = states.shape[2]
    entropy = torch.zeros(len(states), dtype=torch.float64, device=states.device)
    measured = torch.zeros(len(states), dtype=torch.bool, device=states.device)
    short = layout.length <= width
    for group, gram in (
        (short, lambda z: z @ z.mT),
        (~short, lambda z: z.mT @ z),
    ):
        if not group.any():
            continue
        longest = int(layout.length[group].max())
        members = states if group.all() else states[group]
        matrices = gram(members[:, :longest])
        entropy[group], measured[group] = _entropies(matrices, alpha, clip)
    return entropy, measured


def _entropies(
    matrices: torch.Tensor, alpha: float, clip: bool
) -> tuple[torch.Tensor, torch.Tensor]:
    """The entropies (k,) float64 of symmetric matrices (k, m, m), and which are nonzero
    (NaN counts as nonzero, so that it reaches the mean); NaN for one holding NaN or
    infinity."""
    finite = torch.isfinite(matrices).all(dim=2).all(dim=1)
    matrices = torch.where(finite[:, None, None], matrices, 0.0)
    if clip:
        matrices = matrices.clamp_(min=0)
    eigenvalues = torch.linalg.eigvalsh(matrices).to(torch.float64)
    nonzero = (matrices != 0).any(dim=2).any(dim=1) | ~finite
    entropy = torch.where(nonzero, renyi_entropy(eigenvalues, alpha), 0.0)
    return torch.where(finite, entropy, torch.nan), nonzero


def curvatures(
    rows: torch.Tensor, layout: TextLayout, absolute: bool
) -> tuple[torch.Tensor, torch.Tensor]:
    """Each text's mean angle between consecutive steps (B,) float64 in radians (0 for a
    text with no angle counted), and whether the text counts (B,) bool, from its rows
    (n, d): the steps are their differences (in the rows' dtype), their lengths and dot
    products float64; ``absolute``: the authors' arccos |cos| with zero steps as angle 0 and
    every text counted, else the signed angle with undefined angles and texts without one
    left out (see the module docstring)."""
    steps = (rows[1:] - rows[:-1]).to(torch.float64)
    size = torch.linalg.vector_norm(steps, dim=1)
    dot = torch.einsum("nd,nd->n", steps[1:], steps[:-1])
    cosine = dot / (size[1:] * size[:-1])
    nonzero = (size[1:] != 0) & (size[:-1] != 0)
    if absolute:
        angle = torch.where(nonzero, torch.arccos(cosine.abs().clamp(max=1.0)), 0.0)
        valid = layout.same_text
    else:
        angle = torch.arccos(cosine.clamp(-1.0, 1.0))
        valid = layout.same_text & nonzero
    text = layout.slot[:-2]
    count = torch.zeros(len(layout.length), dtype=torch.float64, device=rows.device)
    count.index_add_(0, text, valid.to(torch.float64))
    total = torch.zeros_like(count).index_add_(0, text, torch.where(valid, angle, 0.0))
    curvature = torch.where(count > 0, total / count.clamp(min=1), 0.0)
    counted = torch.ones_like(count, dtype=torch.bool) if absolute else count > 0
    return curvature, counted
