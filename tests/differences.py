"""Values of an output table against their independent references, column by column,
checked as whole arrays with ``numpy.testing.assert_allclose``: a NaN on either side fails
(Python's ``max(0.0, nan)`` is 0.0, so a running maximum would let it through), and so does
a comparison that compared nothing."""

from __future__ import annotations

from collections import defaultdict

import numpy as np


class Differences:
    """Pairs (found, expected) collected per column, then checked at once."""

    def __init__(self) -> None:
        self.found: dict[str, list[float]] = defaultdict(list)
        self.expected: dict[str, list[float]] = defaultdict(list)

    def add(self, column: str, found, expected) -> None:
        """One value, or an array of them, of ``column`` and its reference."""
        self.found[column].extend(np.ravel(np.asarray(found, dtype=float)))
        self.expected[column].extend(np.ravel(np.asarray(expected, dtype=float)))

    def check(self, name: str, rtol: float = 0.0, atol: float = 0.0) -> str:
        """Assert every column within |found − expected| ≤ atol + rtol·|expected| and
        finite; return a line of each column's largest difference (absolute, and relative
        where ``rtol`` bounds it)."""
        assert self.expected and all(self.expected.values()), f"{name}: nothing compared"
        parts = []
        for column, expected in self.expected.items():
            found, expected = np.array(self.found[column]), np.array(expected)
            assert np.isfinite(expected).all(), f"{name} {column}: a reference is not finite"
            np.testing.assert_allclose(
                found, expected, rtol=rtol, atol=atol, err_msg=f"{name} {column}"
            )
            difference = np.abs(found - expected)
            relative = difference / np.maximum(np.abs(expected), np.finfo(float).tiny)
            largest = relative.max() if rtol and not atol else difference.max()
            parts.append(f"{column} {largest:.3g} ({len(found)} values)")
        return f"{name} max |diff|{' (relative)' if rtol and not atol else ''}: " + ", ".join(parts)
