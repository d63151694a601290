"""Gram products in column blocks against NumPy's float64 product: every block count, both
dtypes, an accumulating target, no rows, a NaN."""

import numpy as np
import pytest
import torch

from layerlaws.core.products import BLOCK_WIDTH, MAX_BLOCKS, add_gram_, gram


@pytest.mark.parametrize("width", [5, 2 * BLOCK_WIDTH + 7, 3 * BLOCK_WIDTH, 6 * BLOCK_WIDTH])
@pytest.mark.parametrize("dtype, rtol", [(torch.float64, 1e-13), (torch.float32, 1e-5)])
def test_a_gram_product_is_rows_transposed_times_rows(width, dtype, rtol):
    generator = torch.Generator().manual_seed(width)
    rows = torch.randn(50, width, generator=generator, dtype=torch.float64)
    expected = rows.numpy().T @ rows.numpy()
    found = gram(rows.to(dtype))
    assert found.dtype == dtype
    np.testing.assert_allclose(found.double().numpy(), expected, rtol=rtol, atol=rtol * 50)


def test_adding_accumulates_into_a_symmetric_target():
    generator = torch.Generator().manual_seed(0)
    first, second = torch.randn(2, 30, 4 * BLOCK_WIDTH, generator=generator, dtype=torch.float64)
    target = gram(first)
    add_gram_(target, second)
    both = torch.cat([first, second]).numpy()
    np.testing.assert_allclose(target.numpy(), both.T @ both, rtol=1e-13, atol=1e-12)
    assert MAX_BLOCKS == 4, "the widths above exercise 1 to MAX_BLOCKS blocks"


def test_no_rows_give_zeros_and_a_nan_spreads_to_its_row_and_column():
    assert torch.equal(gram(torch.empty(0, 500)), torch.zeros(500, 500))
    rows = torch.ones(3, 500, dtype=torch.float64)
    rows[1, 7] = torch.nan
    nan = torch.isnan(gram(rows)).numpy()
    expected = np.zeros((500, 500), dtype=bool)
    expected[7, :] = expected[:, 7] = True
    np.testing.assert_array_equal(nan, expected)
