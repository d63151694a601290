"""Shape of the residual-stream trajectory x^0 → x^L of one token (paper 004).

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
    """LSS of the window of ``width`` steps centred on each block l = 1…L (paper 004: width
    11): the steps of blocks l − ⌊width/2⌋ … l + ⌊width/2⌋, cut at the first and last
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
    """Coefficient of variation Std_l / Mean_l of the step lengths ‖x^l − x^{l−1}‖ (paper
    004, Fig. 23): 0 when the points are equally spaced."""
    lengths = step_lengths(trajectory)
    return float(lengths.std() / lengths.mean())


def expodistance(trajectory: np.ndarray) -> float:
    """ED = Var_l(α^l) / (Mean_l α^l)² with α^l = ln(‖x^l‖ / ‖x^{l−1}‖): 0 when the norm
    grows exactly geometrically."""
    norms = np.linalg.norm(np.asarray(trajectory, dtype=np.float64), axis=1)
    rates = np.diff(np.log(norms))
    return float(rates.var() / rates.mean() ** 2)


def pca_projection(trajectories: np.ndarray) -> np.ndarray:
    """Project trajectories (n_tokens, L + 1, d) on the top two principal components of
    their last layer's points X^L (paper 004, Appendix A.2.1: PC_L is fitted to the last
    layer), centred by the mean of X^L; returns (n_tokens, L + 1, 2) float64 (a second
    coordinate of 0 when X^L spans one direction only)."""
    points = np.asarray(trajectories, dtype=np.float64)
    last = points[:, -1, :]
    mean = last.mean(axis=0)
    _, _, components = np.linalg.svd(last - mean, full_matrices=False)
    projected = (points - mean) @ components[:2].T
    if projected.shape[-1] < 2:
        projected = np.concatenate([projected, np.zeros_like(projected)], axis=-1)
    return projected
