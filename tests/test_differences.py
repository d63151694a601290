"""The references' comparison helper (``tests/differences.py``) fails on a wrong value, on
NaN wherever it stands, and on a comparison of nothing."""

import math

import pytest
from differences import Differences


def compared(pairs, **tolerance):
    differences = Differences()
    for found, expected in pairs:
        differences.add("value", found, expected)
    return differences.check("table", **tolerance)


def test_values_within_the_tolerance_pass_and_are_reported():
    assert "value 1e-10" in compared([(1.0, 1.0), (2.0 + 1e-10, 2.0)], atol=1e-9)


@pytest.mark.parametrize(
    "pairs",
    [
        [(1.0, 1.0), (2.1, 2.0)],  # a wrong value
        [(math.nan, 1.0), (2.0, 2.0)],  # NaN first
        [(1.0, 1.0), (math.nan, 2.0)],  # NaN after a good value: max(0.0, nan) is 0.0
        [(1.0, math.nan)],  # a reference that is not finite
        [],  # nothing compared
    ],
)
def test_a_wrong_value_nan_or_nothing_fails(pairs):
    with pytest.raises(AssertionError):
        compared(pairs, atol=1e-9)
