"""What the geometry observer costs (torch-free, for the planner): its float64
accumulators on each layer's device, what it holds while a batch passes, and its
floating-point operations per token.

With d the hidden size, L + 1 observed layers (0..L), T the tokens of a text and n the
text tokens of a batch:

- accumulators, float64: per layer the second moment Σxxᵀ (d²), Σx and Σx/|x| (2d) and the
  per-text sums (4), plus Σ m mᵀ of the text means (d²) under ``dataset_rows: texts``;
  per compared pair of layers a cross-moment Σ x_l x_mᵀ (d²): L consecutive pairs, and
  L − 1 more against the last layer (``cka_against_last``).
  At d = 4,096 and L = 32: 4.43 GB of moments, 4.43 GB of text-mean moments and, for the
  63 pairs, 8.46 GB of cross-moments (4.23 GB for the 32 consecutive ones alone): 17.3 GB.
- while a batch passes: the states of the layers a later layer is compared with, in the
  compute dtype: the previous layer's, and with ``cka_against_last`` every layer's until
  the last arrives, n × d × (L + 1) in all (the current layer's included): at d = 4,096,
  L = 32 in bfloat16, 270 kB per batch token (2.21 GB for a batch of 8,192 tokens); and
  float64 working copies of one layer's states (a few n × d) and of the texts' Gram
  matrices (n × min(T, d)).
- time: per layer and token 2d² for the second moment, 2·min(T, d)·d for the text's Gram
  matrix and about (4/3)·min(T, d)³ / T for its eigenvalues (prompt entropy), 2d² / T
  for the text means' moment, and 2d² per compared pair: at d = 4,096, L = 32, T = 2,048
  about 1.85 GFLOP per token for the layers and 2.11 GFLOP for the 63 pairs, in float64.
"""

from __future__ import annotations

from layerlaws.geometry.settings import GeometrySettings

FLOAT64_BYTES = 8
WORKING_COPIES = 4
"""float64 copies of one layer's batch states held at once while it is observed: the
states, the texts' padded states, their consecutive steps and the steps' products (the
cross-moments' scratch copy comes after the last three are freed)."""


def accumulator_bytes(settings: GeometrySettings, *, hidden_size: int, num_layers: int) -> int:
    """Bytes of the float64 accumulators of layers 0..``num_layers``, whatever the tokens."""
    d = hidden_size
    per_layer = d * d + 2 * d + 4 + (d * d if settings.dataset_rows == "texts" else 0)
    pairs = len(settings.layer_pairs(num_layers))
    return FLOAT64_BYTES * ((num_layers + 1) * per_layer + pairs * d * d)


def bytes_on_device(
    settings: GeometrySettings,
    *,
    hidden_size: int,
    num_layers: int,
    batch_tokens: int,
    dtype_bytes: int,
    tokens_per_text: int,
) -> int:
    """All the observer needs on the devices at once: its accumulators, and while a batch
    of ``batch_tokens`` text tokens passes the kept states (in the compute dtype,
    ``dtype_bytes`` each) and the float64 working copies."""
    kept_layers = num_layers + 1 if settings.cka_against_last else 2
    kept = batch_tokens * hidden_size * dtype_bytes * kept_layers
    gram = batch_tokens * min(tokens_per_text, hidden_size)
    working = FLOAT64_BYTES * (WORKING_COPIES * batch_tokens * hidden_size + gram)
    accumulators = accumulator_bytes(settings, hidden_size=hidden_size, num_layers=num_layers)
    return accumulators + kept + working


def flops_per_token(
    settings: GeometrySettings, *, hidden_size: int, num_layers: int, tokens_per_text: int
) -> float:
    """Float64 operations per text token over all layers (see the module docstring); the
    sums and norms of order d per layer are counted as 12d."""
    d, width = hidden_size, min(tokens_per_text, hidden_size)
    pooled = 2 * d * d / tokens_per_text if settings.dataset_rows == "texts" else 0.0
    per_layer = 2 * d * d + 2 * width * d + 4 / 3 * width**3 / tokens_per_text + pooled + 12 * d
    return (num_layers + 1) * per_layer + len(settings.layer_pairs(num_layers)) * 2 * d * d


class GeometryCosts:
    """The geometry observer's torch-free part (``layerlaws.forward.observers``): its
    settings class and its costs. ``GeometryObserver`` inherits them, so the workflow
    plans the observer from here without importing torch."""

    settings_class = GeometrySettings
    bytes_on_device = staticmethod(bytes_on_device)
    flops_per_token = staticmethod(flops_per_token)
