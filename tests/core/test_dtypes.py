"""core.dtypes: its table agrees with torch and NumPy, and with the config schema."""

import numpy as np
import pytest
import torch
import yaml

from layerlaws.core.dtypes import DTYPE_BYTES, DTYPES, NUMPY_DTYPES, torch_dtype
from layerlaws.core.errors import LayerlawsError
from layerlaws.core.settings import SCHEMA_FILE

SCHEMA = SCHEMA_FILE


@pytest.mark.parametrize("name", DTYPES)
def test_each_name_has_its_torch_dtype_bytes_and_numpy_storage(name):
    dtype = torch_dtype(name)
    assert (
        dtype
        is {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}[name]
    )
    assert torch.empty(0, dtype=dtype).element_size() == DTYPE_BYTES[name]
    assert np.dtype(NUMPY_DTYPES[name]).itemsize == DTYPE_BYTES[name]
    # Stored values read back bit for bit: bfloat16 as its raw bits.
    values = torch.tensor([1.5, -2.25, 3e-3]).to(dtype)
    stored = values.view(torch.uint16) if name == "bfloat16" else values
    assert stored.numpy().dtype == np.dtype(NUMPY_DTYPES[name])


def test_torch_dtype_takes_torch_names_and_refuses_others():
    assert torch_dtype("torch.bfloat16") is torch.bfloat16
    assert torch_dtype("float64") is torch.float64
    for name in ("int8", "bool", "cuda", "no_such_dtype"):
        with pytest.raises(LayerlawsError, match="floating-point"):
            torch_dtype(name)


def test_the_table_is_what_the_config_accepts():
    schema = yaml.safe_load(SCHEMA.read_text())
    model = schema["properties"]["models"]["additionalProperties"]["properties"]
    assert tuple(model["dtype"]["enum"]) == DTYPES
