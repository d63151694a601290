"""What the geometry observer costs (torch-free, for the planner): its float64
accumulators on each layer's device, what it holds while a batch passes, and its
floating-point operations per token.

With d the hidden size, L + 1 observed layers (0..L), T the tokens of a text and n the
text tokens of a batch:

- accumulators, float64: per layer the second moment Σyyᵀ (d²) of the states shifted by
  c, c, Σy and Σx/|x| (3d) and the per-text sums (7), plus the dataset entropy's text rows
  or their moment (d²) under ``dataset_rows: texts``; per compared pair of layers a
  cross-moment Σ y_l y_mᵀ (d²): L
  consecutive pairs, and L − 1 more against the last layer (``cka_against_last``).
  At d = 4,096 and L = 32: 4.43 GB of moments, 4.43 GB of text rows and, for the 63 pairs,
  8.46 GB of cross-moments (4.23 GB for the 32 consecutive ones alone): 17.3 GB.
- while a batch passes, in the product dtype (``product_dtype``, float32 by default): the
  shifted states of the layers a later layer is compared with (the previous layer's and,
  with ``cka_against_last``, every layer's until the last arrives), n × d × (L + 1) in all
  (the current layer's included): at d = 4,096, L = 32 in float32, 540 kB per batch token
  (4.4 GB for a batch of 8,192 tokens); working copies of one layer's states (two in the
  product dtype; seven in float64: the states, their shifted copy (for a float64 second
  moment), the unit vectors, the curvature's steps and their lengths and products), the
  texts' Gram matrices (n × min(T, d)), and d × d matrices: the product, the float64 second
  moment and, under ``dataset_rows: texts``, the text rows' moment.
- time: per layer and token about (2/3)·2d² for the second moment (a Gram product,
  ``layerlaws.core.products``; in float64 for layer 0 and each layer's first d rows, too
  few to count here), 2·min(T, d)·d for the text's Gram matrix and about (4/3)·min(T, d)³
  / T for its eigenvalues (prompt entropy), 2d² / T for the text rows' moment, and 2d² per
  compared pair: at d = 4,096, L = 32, T = 2,048 about 1.5 G operations
  per token for the layers and 2.1 G for the 63 pairs. Counted as float64 operations, the
  float32 products as half of one (a CPU does float32 at twice the float64 rate; many
  GPUs at more).
"""

from __future__ import annotations

from layerlaws.geometry.settings import GeometrySettings

FLOAT64_BYTES = 8
PRODUCT_BYTES = {"float32": 4, "float64": 8}
PRODUCT_COST = {"float32": 0.5, "float64": 1.0}
"""An operation in the product dtype, in float64 operations (``flops_per_token``)."""
GRAM_SHARE = 2 / 3
"""A Gram product's operations, as a share of a general product's of the same width."""
TEXT_SUMS = 7
"""The per-text sums of a layer (``layerlaws.geometry.observer.TEXT_SUMS``)."""
FLOAT64_COPIES = 7
"""The float64 working copies of one layer's batch states (see the module docstring)."""


def accumulator_bytes(settings: GeometrySettings, *, hidden_size: int, num_layers: int) -> int:
    """Bytes of the float64 accumulators of layers 0..``num_layers``, whatever the tokens."""
    d = hidden_size
    per_layer = d * d + 3 * d + TEXT_SUMS + (d * d if settings.dataset_rows == "texts" else 0)
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
    of ``batch_tokens`` text tokens passes the kept states and the working copies (in the
    product dtype, whatever the compute dtype's ``dtype_bytes``; see the module docstring)."""
    d, width = hidden_size, min(tokens_per_text, hidden_size)
    product = PRODUCT_BYTES[settings.product_dtype]
    kept_layers = num_layers + 1 if settings.cka_against_last else 2
    kept = batch_tokens * d * product * kept_layers
    copies = batch_tokens * d * (2 * product + FLOAT64_COPIES * FLOAT64_BYTES)
    gram = batch_tokens * width * (product + FLOAT64_BYTES)
    accumulators = accumulator_bytes(settings, hidden_size=d, num_layers=num_layers)
    matrices = d * d * (product + FLOAT64_BYTES * (2 if settings.dataset_rows == "texts" else 1))
    return accumulators + kept + copies + gram + matrices


def flops_per_token(
    settings: GeometrySettings, *, hidden_size: int, num_layers: int, tokens_per_text: int
) -> float:
    """Operations per text token over all layers, in float64 operations (see the module
    docstring); the sums, norms and steps of order d per layer are counted as 24d."""
    d, width = hidden_size, min(tokens_per_text, hidden_size)
    pooled = 2 * d * d / tokens_per_text if settings.dataset_rows == "texts" else 0.0
    products = GRAM_SHARE * 2 * d * d + 2 * width * d
    pairs = len(settings.layer_pairs(num_layers)) * 2 * d * d
    spectra = 4 / 3 * width**3 / tokens_per_text + pooled + 24 * d
    cost = PRODUCT_COST[settings.product_dtype]
    return (num_layers + 1) * (cost * products + spectra) + cost * pairs


class GeometryCosts:
    """The geometry observer's torch-free part (``layerlaws.forward.observers``): its
    settings class and its costs. ``GeometryObserver`` inherits them, so the workflow
    plans the observer from here without importing torch."""

    settings_class = GeometrySettings
    bytes_on_device = staticmethod(bytes_on_device)
    flops_per_token = staticmethod(flops_per_token)
