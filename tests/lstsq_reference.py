"""An independent PR reference: the regression rows of kept hidden states built by hand and
solved with float64 numpy.linalg.lstsq. Nothing of the library's statistics is used: the
norms are torch's own functional LayerNorm and RMSNorm (default-initialised: no weight,
no bias) and NumPy's standard deviation, the cut-off the config's default, written here."""

import numpy as np
import torch

CUTOFF = 1e-12
"""The config schema's default ``equilearning.cutoff`` (relative eigenvalue cut-off)."""


def normalized(x: np.ndarray, norm: str, norm_type: str, eps: float) -> np.ndarray:
    """Rows (n, d) float64 under He & Su's norms: ``model``, the model's own kind of norm,
    default-initialised, with its eps; ``standardize``, (x − mean) / std per row (a row of
    std 0 becomes 0); ``none``, as they are."""
    if norm == "none":
        return x
    if norm == "standardize":
        centred = x - x.mean(axis=1, keepdims=True)
        std = x.std(axis=1, keepdims=True)
        return np.divide(centred, std, out=np.zeros_like(centred), where=std > 0)
    rows = torch.from_numpy(x)
    if norm_type == "layernorm":
        return torch.nn.functional.layer_norm(rows, (x.shape[1],), eps=eps).numpy()
    return torch.nn.functional.rms_norm(rows, (x.shape[1],), eps=eps).numpy()


def lstsq_pr(features: np.ndarray, targets: np.ndarray) -> float:
    """1 − R² of the centred targets on the centred features, float64 lstsq (rcond as in
    ``reference_pr``)."""
    design = features - features.mean(axis=0)
    y = targets.astype(np.float64) - targets.mean()
    solution = np.linalg.lstsq(design, y, rcond=np.sqrt(CUTOFF))[0]
    return float(((y - design @ solution) ** 2).sum() / (y**2).sum())


def reference_pr(hidden, layer, offset, norm, shuffled, shuffle="vocabulary"):
    """Build the regression rows by hand (a Python loop over tokens; for masked-LM rows, only
    those with ``is_target``; ``shuffled`` targets renamed by a permutation seeded 0 of the
    whole vocabulary, or under ``shuffle="present"`` of the offset's distinct targets, as a
    dictionary like He & Su's released code) and solve with
    float64 lstsq on the centred rows; rcond = sqrt(cutoff) drops the same directions as
    our eigenvalue cut-off (features right after a LayerNorm are exactly rank-deficient)."""
    meta = hidden.metadata
    x = hidden.layer(layer).astype(np.float64)
    # He & Su's ``model`` norm is for pre-LN models: a post-LN stream is used as it is.
    if layer < hidden.num_layers and not (norm == "model" and meta["post_ln"]):
        x = normalized(x, norm, meta["norm_type"], meta["norm_eps"])
    where = {
        (s, p): t
        for s, p, t in hidden.rows.select("sentence_id", "position", "token_id").iter_rows()
    }
    has_target = (
        hidden.rows["is_target"].to_list()
        if "is_target" in hidden.rows.columns
        else [True] * hidden.rows.height
    )
    inputs, targets = [], []
    for row, (s, p) in enumerate(hidden.rows.select("sentence_id", "position").iter_rows()):
        if has_target[row] and (s, p + offset) in where:
            token = where[(s, p + offset)]
            inputs.append(x[row])
            targets.append(token)
    if shuffled:
        renamed = renaming(targets, meta["vocab_size"], shuffle)
        targets = [renamed[token] for token in targets]
    design = np.array(inputs)
    design -= design.mean(axis=0)
    y = np.array(targets, dtype=np.float64)
    y -= y.mean()
    solution = np.linalg.lstsq(design, y, rcond=np.sqrt(CUTOFF))[0]
    return ((y - design @ solution) ** 2).sum() / (y**2).sum(), len(y)


def renaming(targets, vocab_size, shuffle):
    """The shuffled-vocabulary renaming of token ids: a seeded permutation of the whole
    vocabulary, or (``present``) of the distinct ``targets`` among themselves."""
    if shuffle == "vocabulary":
        return dict(enumerate(np.random.default_rng(0).permutation(vocab_size)))
    labels = np.unique(targets)
    return dict(zip(labels, np.random.default_rng(0).permutation(labels), strict=True))
