"""The layers of the token-wise coupling (Aubry et al. §3.1), from the config alone (no
torch: the workflow plans jobs with it)."""

from __future__ import annotations

from collections.abc import Sequence

from layerlaws.core.errors import LayerlawsError


def layer_pairs(
    configured: Sequence[int | Sequence[int]], num_layers: int
) -> list[tuple[int, int]]:
    """The token-wise coupling's layer pairs: a configured layer l stands for (l, l), a
    pair [l, l′] for itself; the middle layer (l, l) when none is configured."""
    pairs = [
        (entry, entry) if isinstance(entry, int) else (entry[0], entry[1]) for entry in configured
    ] or [(max(1, num_layers // 2),) * 2]
    beyond = [pair for pair in pairs if max(pair) > num_layers]
    if beyond:
        raise LayerlawsError(
            f"coupling.token_layers name layers {beyond} beyond the model's {num_layers}"
        )
    return pairs
