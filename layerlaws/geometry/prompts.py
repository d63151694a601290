"""Skean et al.'s (2025, §3) per-prompt quantities of one layer's batch, made on the device
while the batch passes: each text's states (raw, or normalised as the authors' released code
normalises them), its prompt entropy, its curvature, and its row of the dataset entropy's
matrix (its mean state).

A batch's texts come as zero-padded states (B, T, d) and their lengths (B,): text b's tokens
are rows 0..length[b] − 1 of ``padded[b]``, in position order; the padding stays zero.

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

from layerlaws.forward.model_pass import Batch
from layerlaws.geometry.spectra import renyi_entropy


@dataclass(frozen=True)
class TextLayout:
    """Where a batch's rows go among its texts: text ``slot`` (0..B−1) and ``rank`` (its
    place by position in the text) of each row, each text's ``length`` (rows) and the
    ``longest``."""

    slot: torch.Tensor
    rank: torch.Tensor
    length: torch.Tensor
    longest: int

    @classmethod
    def of(cls, batch: Batch) -> TextLayout:
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

    def to(self, device: torch.device) -> TextLayout:
        return TextLayout(
            self.slot.to(device), self.rank.to(device), self.length.to(device), self.longest
        )

    def padded(self, rows: torch.Tensor) -> torch.Tensor:
        """The rows (n, d) laid out by text, (B, T, d) in their dtype, zero-padded."""
        padded = rows.new_zeros(len(self.length), self.longest, rows.shape[1])
        padded[self.slot, self.rank] = rows
        return padded


def normalized(padded: torch.Tensor, length: torch.Tensor) -> torch.Tensor:
    """Each text's states (B, T, d) centred on its mean token state and each token scaled to
    unit length, float64 (the authors' ``normalize``); a token whose centred state is zero
    stays zero, and so does the padding. NaN propagates."""
    states = padded.to(torch.float64)
    real = torch.arange(states.shape[1], device=states.device) < length[:, None]
    mean = states.sum(dim=1) / length.clamp(min=1)[:, None]
    centred = (states - mean[:, None]) * real[:, :, None]
    size = torch.linalg.vector_norm(centred, dim=2, keepdim=True)
    return torch.where(size == 0, 0.0, centred / size)


def prompt_entropies(
    states: torch.Tensor, length: torch.Tensor, alpha: float, clip: bool
) -> tuple[torch.Tensor, torch.Tensor]:
    """Each text's matrix-based entropy (B,) float64 in nats, from its zero-padded states
    (B, T, d) in the dtype the products are made in: of ZZᵀ when the text has at most d
    tokens, else of ZᵀZ (the same nonzero eigenvalues, unless ``clip`` sets their negative
    entries to 0, as the authors' code does to whichever is smaller); and whether the text
    has one (B,) bool: not when its states are all zero. NaN for a text holding NaN or
    infinity."""
    width = states.shape[2]
    entropy = torch.zeros(len(states), dtype=torch.float64, device=states.device)
    measured = torch.zeros(len(states), dtype=torch.bool, device=states.device)
    short = length <= width
    for group, gram in (
        (short, lambda z: z @ z.mT),
        (~short, lambda z: z.mT @ z),
    ):
        if not group.any():
            continue
        longest = int(length[group].max())
        matrices = gram(states[group][:, :longest])
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
        matrices = matrices.clamp(min=0)
    eigenvalues = torch.linalg.eigvalsh(matrices).to(torch.float64)
    nonzero = (matrices != 0).any(dim=2).any(dim=1) | ~finite
    entropy = torch.where(nonzero, renyi_entropy(eigenvalues, alpha), 0.0)
    return torch.where(finite, entropy, torch.nan), nonzero


def curvatures(
    states: torch.Tensor, length: torch.Tensor, absolute: bool
) -> tuple[torch.Tensor, torch.Tensor]:
    """Each text's mean angle between consecutive steps (B,) float64 in radians (0 for a
    text with no angle counted), and whether the text counts (B,) bool, from its
    zero-padded float64 states (B, T, d) and lengths (B,); ``absolute``: the authors'
    arccos |cos| with zero steps as angle 0 and every text counted, else the signed angle
    with undefined angles and texts without one left out (see the module docstring)."""
    steps = states[:, 1:] - states[:, :-1]
    size = torch.linalg.vector_norm(steps, dim=2)
    cosine = (steps[:, 1:] * steps[:, :-1]).sum(dim=2) / (size[:, 1:] * size[:, :-1])
    place = torch.arange(cosine.shape[1], device=states.device) < (length - 2)[:, None]
    nonzero = (size[:, 1:] != 0) & (size[:, :-1] != 0)
    if absolute:
        angle = torch.where(nonzero, torch.arccos(cosine.abs().clamp(max=1.0)), 0.0)
        valid = place
    else:
        angle = torch.arccos(cosine.clamp(-1.0, 1.0))
        valid = place & nonzero
    count = valid.sum(dim=1)
    total = torch.where(valid, angle, 0.0).sum(dim=1)
    curvature = torch.where(count > 0, total / count.clamp(min=1), 0.0)
    counted = torch.ones_like(count, dtype=torch.bool) if absolute else count > 0
    return curvature, counted
