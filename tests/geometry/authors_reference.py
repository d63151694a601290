"""The geometry quantities as their authors' released code computes them, in NumPy float64,
written from that code (not from ``layerlaws.geometry``), for the tests to compare the
observer's table with. Each function names its source; where the project deliberately
differs from the authors' code, the function does what the project documents and says so.

States are given as ``x`` (n, d), every token's state, and ``texts`` (n,), each token's
text, its tokens in position order.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np


def per_text(x: np.ndarray, texts: np.ndarray) -> list[np.ndarray]:
    """Each text's states (T, d), in order of first appearance."""
    _, first = np.unique(texts, return_index=True)
    return [x[texts == texts[start]] for start in sorted(first)]


def normalize(states: np.ndarray) -> np.ndarray:
    """OFSkean/information_flow, metric_functions.normalize (after waltonfuture/Matrix-Entropy):
    the states centred on their mean, each row scaled to unit length. Project's choice: a
    row whose centred state is zero (the only token of a one-token text) stays zero, where
    the authors' division gives NaN."""
    centred = states - states.mean(axis=0)
    norms = np.linalg.norm(centred, axis=1, keepdims=True)
    return np.divide(centred, norms, out=np.zeros_like(centred), where=norms > 0)


def matrix_alpha_entropy(matrix: np.ndarray, alpha: float) -> float:
    """repitl, matrix_itl.matrixAlphaEntropy (as OFSkean/information_flow calls it): the
    eigenvalues > 0 of a symmetric matrix, normalised to sum 1, H = log Σ pᵅ / (1 − α), and
    at α = 1 its limit −Σ p log p. NaN when no eigenvalue is positive."""
    values = np.linalg.eigvalsh(matrix)
    p = values[values > 0]
    if len(p) == 0:
        return float("nan")
    p = p / p.sum()
    if alpha == 1:
        return float(-(p * np.log(p)).sum())
    return float(np.log((p**alpha).sum()) / (1 - alpha))


def compute_entropy(z: np.ndarray, alpha: float, clip: bool = True) -> float | None:
    """OFSkean/information_flow, metric_functions.compute_entropy for one layer: the Gram
    matrix ZZᵀ when N ≤ D, else ZᵀZ, negative entries set to 0 (``clip``), divided by its
    trace, ``matrix_alpha_entropy``. Project's choice: None (no entropy) when the matrix is
    zero (all rows zero), where the authors' division gives NaN. ``clip=False`` is the
    project's ``prompt_states: raw`` (no clipping)."""
    n, d = z.shape
    gram = z @ z.T if n <= d else z.T @ z
    if clip:
        gram = gram.clip(min=0)
    trace = np.trace(gram)
    if trace == 0:
        return None
    return matrix_alpha_entropy(gram / trace, alpha)


def compute_curvature(states: np.ndarray, absolute: bool = True) -> float | None:
    """One text's curvature, the mean angle between consecutive steps v_k = x_k − x_{k−1}.

    ``absolute`` (the default): OFSkean/information_flow, metric_functions.compute_curvature
    (calculate_layer_average_k_curvature, k = 1): arccos |cos| ∈ [0, π/2], a zero step
    counting as angle 0, and 0 for a text with no angle (fewer than 3 tokens).
    ``absolute=False``: the project's ``curvature_angle: signed`` (Hosseini & Fedorenko
    2023): arccos cos ∈ [0, π], angles with a zero step left out, None for a text with no
    angle left."""
    angles = []
    for k in range(1, len(states) - 1):
        before, after = states[k] - states[k - 1], states[k + 1] - states[k]
        norms = np.linalg.norm(before) * np.linalg.norm(after)
        if norms == 0:
            if absolute:
                angles.append(0.0)
            continue
        cosine = before @ after / norms
        angles.append(np.arccos(np.clip(abs(cosine) if absolute else cosine, -1, 1)))
    if not angles:
        return 0.0 if absolute else None
    return float(np.mean(angles))


def text_states(z: np.ndarray, normalized: bool) -> np.ndarray:
    """A text's states as the prompt entropy, dataset entropy and curvature take them:
    ``normalize``d (OFSkean/information_flow, metric_utils.compute_per_forward_pass and
    compute_on_concatenated_passes normalise every pass's states) or raw."""
    return normalize(z) if normalized else z


def prompt_entropy(
    x: np.ndarray, texts: np.ndarray, alpha: float = 1.0, normalized: bool = True
) -> float:
    """OFSkean/information_flow, metric_utils.compute_per_forward_pass with compute_entropy:
    the mean over texts of each text's ``compute_entropy`` of its ``text_states``. Project's
    choice: a text whose states are all zero (a one-token text, normalised) has no prompt
    entropy and is left out of the mean (the authors' code gives NaN). Raw states are not
    clipped (``prompt_states: raw``)."""
    values = [
        compute_entropy(text_states(z, normalized), alpha, clip=normalized)
        for z in per_text(x, texts)
    ]
    return float(np.mean([value for value in values if value is not None]))


def curvature(x: np.ndarray, texts: np.ndarray, normalized: bool = True, absolute: bool = True):
    """OFSkean/information_flow, metric_utils.compute_per_forward_pass with
    compute_curvature: the mean over texts of ``compute_curvature`` of each text's
    ``text_states`` (every text counted, 0 for one without an angle). Under ``absolute=False``
    (the project's ``signed``) texts without an angle are left out."""
    values = [compute_curvature(text_states(z, normalized), absolute) for z in per_text(x, texts)]
    return float(np.mean([value for value in values if value is not None]))


def dataset_entropy(
    x: np.ndarray, texts: np.ndarray, alpha: float = 1.0, normalized: bool = True
) -> float:
    """OFSkean/information_flow, metric_utils.compute_on_concatenated_passes with
    compute_entropy: each text's ``text_states`` averaged into one row, the rows stacked
    (N texts × D) and ``compute_entropy`` of them (ZZᵀ while N ≤ D, else ZᵀZ, clipped).
    Raw states are not clipped (``prompt_states: raw``)."""
    rows = np.array([text_states(z, normalized).mean(axis=0) for z in per_text(x, texts)])
    value = compute_entropy(rows, alpha, clip=normalized)
    return float("nan") if value is None else value


def token_entropy(x: np.ndarray, alpha: float = 1.0) -> float:
    """The project's ``dataset_rows: tokens`` (no author's code): ``matrix_alpha_entropy``
    of the raw token states' Gram matrix, unclipped (the spectrum of Σxxᵀ)."""
    return matrix_alpha_entropy(x @ x.T, alpha)


def rankme(x: np.ndarray, epsilon: float = 1e-7) -> float:
    """RankMe, Garrido et al. 2023 ('RankMe', §3, eq. 1): the singular values σ of the
    uncentred embedding matrix, p = σ / Σσ + ε, exp(−Σ p log p)."""
    singular = np.linalg.svd(x, compute_uv=False)
    p = singular / singular.sum() + epsilon
    return float(np.exp(-(p * np.log(p)).sum()))


def alpha_req(x: np.ndarray, ranks: tuple[int, int] = (6, 100)) -> float:
    """α-ReQ, arnab39/reptrix, alpha.get_powerlaw of utils.get_eigenspectrum: the
    eigenvalues of the centred covariance (PCA's explained variance ratio: their scale
    does not change the slope), largest first; with X = [−log r, 1] and w = 1/r,
    b = (Xᵀ w X)⁻¹ (w X)ᵀ log λ_r, α = b[0]. The project fits ranks ``ranks`` (first and
    last, 1 = largest; theirs default to fit_range = arange(5, 100), i.e. ranks 6 to 100)
    cut to min(d, n − 1). Project's choice: NaN with fewer than two ranks to fit (theirs
    solves a singular system)."""
    centred = x - x.mean(axis=0)
    eigen = np.linalg.eigvalsh(centred.T @ centred / (len(x) - 1))[::-1]
    eigen = eigen / eigen.sum()
    first, last = ranks
    rank = np.arange(first, min(last, x.shape[1], len(x) - 1) + 1, dtype=np.float64)
    if len(rank) < 2:
        return float("nan")
    y = np.log(np.abs(eigen[rank.astype(int) - 1]))
    design = np.column_stack([-np.log(rank), np.ones_like(rank)])
    w = 1.0 / rank[:, None]
    b = np.linalg.solve(design.T @ (design * w), (w * design).T @ y)
    return float(b[0])


def cosines(x: np.ndarray) -> np.ndarray:
    """The cosine of every pair of rows, (n, n)."""
    units = x / np.linalg.norm(x, axis=1, keepdims=True)
    return units @ units.T


def anisotropy(x: np.ndarray, texts: np.ndarray, pairs: str = "other_texts") -> float:
    """Anisotropy, Ethayarajh 2019 ('How Contextual are Contextualized Word
    Representations?', §3.4/4.1: the mean cosine similarity between representations of
    words drawn uniformly from different contexts), exactly: the mean cosine over every
    pair of tokens of different texts (``other_texts``) or, the project's ``all``, over
    every pair of distinct tokens."""
    pair = texts[:, None] != texts[None, :]
    if pairs == "all":
        pair = ~np.eye(len(x), dtype=bool)
    return float(cosines(x)[pair].mean())


def linear_cka(x: np.ndarray, y: np.ndarray) -> float:
    """Linear CKA, Kornblith et al. 2019 ('Similarity of Neural Network Representations
    Revisited', eq. 3 with linear kernels): HSIC(K, L) / √(HSIC(K, K) HSIC(L, L)) on the
    centred Gram matrices K = HXXᵀH, L = HYYᵀH (n × n)."""
    k, l = [(z - z.mean(axis=0)) @ (z - z.mean(axis=0)).T for z in (x, y)]  # noqa: E741
    return float((k * l).sum() / np.sqrt((k * k).sum() * (l * l).sum()))


def layer_quantities(x: np.ndarray, texts: np.ndarray, settings) -> dict[str, float]:
    """Every quantity of one layer but the CKA, as ``settings`` (a GeometrySettings)
    chooses."""
    normalized = settings.prompt_states == "normalized"
    alpha = settings.entropy_alpha
    if settings.dataset_rows == "tokens":
        dataset = token_entropy(x, alpha)
    else:
        dataset = dataset_entropy(x, texts, alpha, normalized)
    return {
        "effective_rank": rankme(x, settings.rankme_epsilon),
        "alpha_req": alpha_req(x, settings.alpha_req_ranks),
        "dataset_entropy": dataset,
        "prompt_entropy": prompt_entropy(x, texts, alpha, normalized),
        "curvature": curvature(x, texts, normalized, settings.curvature_angle == "absolute"),
        "anisotropy": anisotropy(x, texts, settings.anisotropy_pairs),
    }


def reference_rows(
    rows: Callable[[int], tuple[np.ndarray, np.ndarray]], settings, num_layers: int
) -> list[dict[str, float]]:
    """The observer's table as the references give it, one record per layer 0..L, from
    ``rows(layer)`` = (x, texts) of every layer (without ``cka_last`` unless
    ``settings.cka_against_last``)."""
    records = []
    last, _ = rows(num_layers)
    for layer in range(num_layers + 1):
        x, texts = rows(layer)
        record = {
            "layer": layer,
            "n_rows": len(x),
            "n_texts": len(np.unique(texts)),
            **layer_quantities(x, texts, settings),
            "cka_previous": linear_cka(rows(layer - 1)[0], x) if layer else float("nan"),
        }
        if settings.cka_against_last:
            record["cka_last"] = linear_cka(x, last)
        records.append(record)
    return records
