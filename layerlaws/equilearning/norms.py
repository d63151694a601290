"""Normalisation of intermediate hidden states before regression (He & Su, Supplementary
Materials: General Setup and Fig. S10).

All functions take and return float64 tensors of shape (n_rows, hidden_dim), on any
device, and act on each row (one token's hidden state) on its own.
"""

from __future__ import annotations

import torch

NORMS = ("model", "standardize", "none")


def _mean_square(x: torch.Tensor) -> torch.Tensor:
    """Mean of the squares of each row, shape (n_rows, 1)."""
    return (x * x).mean(dim=1, keepdim=True)


def layer_norm(x: torch.Tensor, eps: float) -> torch.Tensor:
    """A default-initialised LayerNorm (weight 1, bias 0): (x − mean) / sqrt(var + eps)."""
    centred = x - x.mean(dim=1, keepdim=True)
    return centred / torch.sqrt(_mean_square(centred) + eps)


def rms_norm(x: torch.Tensor, eps: float) -> torch.Tensor:
    """A default-initialised RMSNorm (weight 1): x / sqrt(mean(x²) + eps)."""
    return x / torch.sqrt(_mean_square(x) + eps)


def standardize(x: torch.Tensor) -> torch.Tensor:
    """z = (x − mean) / std across the hidden dimension (a row with std 0 becomes 0)."""
    centred = x - x.mean(dim=1, keepdim=True)
    std = torch.sqrt(_mean_square(centred))
    return torch.where(std > 0, centred / torch.where(std > 0, std, 1.0), 0.0)


def normalize(x: torch.Tensor, norm: str, norm_type: str, eps: float) -> torch.Tensor:
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
