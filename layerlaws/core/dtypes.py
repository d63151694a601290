"""The floating-point dtypes a model runs and keeps its states in, by name, in one table
(no torch: the torch dtype of a name is looked up only when asked for).

``DTYPE_BYTES``: bytes per element; ``NUMPY_DTYPES``: the NumPy dtype values of that name
are stored as (bfloat16, which NumPy lacks, as its raw 16 bits, ``uint16``). Their keys are
the names the config accepts for ``models.<key>.dtype``.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from layerlaws.core.errors import LayerlawsError

DTYPE_BYTES = {"float32": 4, "bfloat16": 2, "float16": 2}
"""Name → bytes per element."""
NUMPY_DTYPES = {"float32": np.float32, "bfloat16": np.uint16, "float16": np.float16}
"""Name → the NumPy dtype of stored values (bfloat16 as raw bits)."""
DTYPES = tuple(DTYPE_BYTES)
"""The names, float32 first."""


def torch_dtype(name: str) -> Any:
    """The torch dtype of a name (``float32``, ``torch.bfloat16``, or any other floating
    dtype torch names); imports torch."""
    import torch

    dtype = getattr(torch, name.removeprefix("torch."), None)
    if not isinstance(dtype, torch.dtype) or not dtype.is_floating_point:
        raise LayerlawsError(f"{name!r} is not a floating-point torch dtype (e.g. {DTYPES})")
    return dtype
