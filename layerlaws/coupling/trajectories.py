"""Shape of the residual-stream trajectory x^0 → x^L of one token (Aubry et al., §3.2–3.3).

Arrays are (L + 1, d): the residual stream after each block, x^0 the embedding.
"""

from __future__ import annotations

import numpy as np


def line_shape_score(trajectory: np.ndarray) -> float:
    """LSS = L / ‖x̃^L − x̃^0‖ with x̃^l = x̃^{l−1} + (x^l − x^{l−1}) / ‖x^l − x^{l−1}‖: the
    length of the path of unit steps over the distance it covers; 1 for a straight line,
    larger for a bent one. Steps of length 0 have no direction and are left out."""
    steps = np.diff(np.asarray(trajectory, dtype=np.float64), axis=0)
    lengths = np.linalg.norm(steps, axis=1)
    moving = lengths > 0
    covered = np.linalg.norm((steps[moving] / lengths[moving, None]).sum(axis=0))
    return float(moving.sum() / covered) if covered > 0 else float("inf")


def windowed_line_shape(trajectory: np.ndarray, width: int) -> np.ndarray:
    """LSS of the window of ``width`` steps centred on each block l = 1…L (Aubry et al.:
    width 11): the steps of blocks l − ⌊width/2⌋ … l + ⌊width/2⌋, cut at the first and last
    block; shape (L,)."""
    layers = len(trajectory) - 1
    half = width // 2
    return np.array(
        [
            line_shape_score(trajectory[max(layer - half, 1) - 1 : min(layer + half, layers) + 1])
            for layer in range(1, layers + 1)
        ]
    )


def step_lengths(trajectory: np.ndarray) -> np.ndarray:
    """‖x^l − x^{l−1}‖ for l = 1…L, shape (L,) float64."""
    return np.linalg.norm(np.diff(np.asarray(trajectory, dtype=np.float64), axis=0), axis=1)


def equidistance_cv(trajectory: np.ndarray) -> float:
    """Coefficient of variation Std_l / Mean_l of the step lengths ‖x^l − x^{l−1}‖ (Aubry
    et al., Fig. 23): 0 when the points are equally spaced."""
    lengths = step_lengths(trajectory)
    return float(lengths.std() / lengths.mean())


def expodistance(trajectory: np.ndarray) -> float:
    """ED = Var_l(α^l) / (Mean_l α^l)² with α^l = ln(‖x^l‖ / ‖x^{l−1}‖): 0 when the norm
    grows exactly geometrically."""
    norms = np.linalg.norm(np.asarray(trajectory, dtype=np.float64), axis=1)
    rates = np.diff(np.log(norms))
    return float(rates.var() / rates.mean() ** 2)
