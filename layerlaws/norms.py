"""Normalisation of intermediate hidden states before regression (SCIENCE.md §2).

All functions take and return float64 arrays of shape (n_rows, hidden_dim) and act on
each row (one token's hidden state) on its own.
"""

from __future__ import annotations

import numpy as np

NORMS = ("model", "standardize", "none")


def _mean_square(x: np.ndarray) -> np.ndarray:
    """Mean of the squares of each row, shape (n_rows, 1)."""
    return (np.einsum("ij,ij->i", x, x) / x.shape[1])[:, None]


def layer_norm(x: np.ndarray, eps: float) -> np.ndarray:
    """A default-initialised LayerNorm (weight 1, bias 0): (x − mean) / sqrt(var + eps)."""
    centred = x - x.mean(axis=1, keepdims=True)
    return centred / np.sqrt(_mean_square(centred) + eps)


def rms_norm(x: np.ndarray, eps: float) -> np.ndarray:
    """A default-initialised RMSNorm (weight 1): x / sqrt(mean(x²) + eps)."""
    return x / np.sqrt(_mean_square(x) + eps)


def standardize(x: np.ndarray) -> np.ndarray:
    """z = (x − mean) / std across the hidden dimension (a row with std 0 becomes 0)."""
    centred = x - x.mean(axis=1, keepdims=True)
    std = np.sqrt(_mean_square(centred))
    return np.divide(centred, std, out=np.zeros_like(centred), where=std > 0)


def normalize(x: np.ndarray, norm: str, norm_type: str, eps: float) -> np.ndarray:
    """Apply the normalisation ``norm`` (one of NORMS).

    ``model`` uses a default-initialised norm of the model's own ``norm_type``
    (``layernorm`` or ``rmsnorm``) with the model's ``eps``.
    """
    if norm == "none":
        return x
    if norm == "standardize":
        return standardize(x)
    if norm == "model":
        return layer_norm(x, eps) if norm_type == "layernorm" else rms_norm(x, eps)
    raise ValueError(f"unknown norm {norm!r}; allowed: {list(NORMS)}")
