"""Gram products rowsᵀ rows of a batch's rows, the symmetric matrix products that the
streamed statistics are made of, in about two thirds of a general product's operations:
the columns are cut into blocks of at least ``BLOCK_WIDTH`` (at most ``MAX_BLOCKS``), the
blocks on and above the diagonal are multiplied and those below are copied from them."""

from __future__ import annotations

from itertools import pairwise
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import torch

BLOCK_WIDTH = 192
"""The narrowest column block: narrower products run too far below a CPU's peak."""
MAX_BLOCKS = 4
"""At k blocks a Gram product costs (k + 1) / 2k of a general one: 2/3 at 3, 5/8 at 4."""


def gram(rows: torch.Tensor) -> torch.Tensor:
    """rowsᵀ rows, (p, p) in the dtype of ``rows`` (n, p), a new tensor on their device."""
    product = rows.new_zeros(rows.shape[1], rows.shape[1])
    add_gram_(product, rows)
    return product


def add_gram_(target: torch.Tensor, rows: torch.Tensor) -> None:
    """Add rowsᵀ rows to ``target`` (p, p), symmetric, in place; ``rows`` (n, p) of its dtype
    and device. Allocates nothing of size p × p: each block below the diagonal becomes the
    transpose of its mirror above (both were each other's transpose before)."""
    blocks = _blocks(rows.shape[1])
    for number, first in enumerate(blocks):
        target[first, first].addmm_(rows[:, first].T, rows[:, first])
        for second in blocks[number + 1 :]:
            target[first, second].addmm_(rows[:, first].T, rows[:, second])
            target[second, first].copy_(target[first, second].T)


def _blocks(width: int) -> list[slice]:
    """The column blocks of a Gram product of ``width`` columns, nearly equal."""
    count = max(1, min(MAX_BLOCKS, width // BLOCK_WIDTH))
    size, longer = divmod(width, count)
    starts = [number * size + min(number, longer) for number in range(count + 1)]
    return [slice(start, stop) for start, stop in pairwise(starts)]
