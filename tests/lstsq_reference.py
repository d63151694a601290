"""An independent PR reference: the regression rows of kept hidden states built by hand and
solved with float64 numpy.linalg.lstsq."""

import numpy as np
import torch

from layerlaws.norms import normalize
from layerlaws.regression import DEFAULT_CUTOFF


def reference_pr(hidden, layer, offset, norm, shuffled):
    """Build the regression rows by hand (a Python loop over tokens) and solve with
    float64 lstsq on the centred rows; rcond = sqrt(cutoff) drops the same directions as
    our eigenvalue cut-off (features right after a LayerNorm are exactly rank-deficient)."""
    meta = hidden.metadata
    x = torch.from_numpy(hidden.layer(layer).astype(np.float64))
    if layer < hidden.num_layers:
        x = normalize(x, norm, meta["norm_type"], meta["norm_eps"])
    x = x.numpy()
    permutation = np.random.default_rng(0).permutation(meta["vocab_size"])
    where = {
        (s, p): t
        for s, p, t in hidden.rows.select("sentence_id", "position", "token_id").iter_rows()
    }
    inputs, targets = [], []
    for row, (s, p) in enumerate(hidden.rows.select("sentence_id", "position").iter_rows()):
        if (s, p + offset) in where:
            token = where[(s, p + offset)]
            inputs.append(x[row])
            targets.append(permutation[token] if shuffled else token)
    design = np.array(inputs)
    design -= design.mean(axis=0)
    y = np.array(targets, dtype=np.float64)
    y -= y.mean()
    solution = np.linalg.lstsq(design, y, rcond=np.sqrt(DEFAULT_CUTOFF))[0]
    return ((y - design @ solution) ** 2).sum() / (y**2).sum(), len(y)
