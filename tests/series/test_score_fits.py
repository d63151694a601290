"""Fig. 8 of Aubry et al. (the scores' exponential fit against coupling, the series' fits
figure) and Fig. 1a take coupling as §5.4 aggregates it: m of Eq. 13 averaged over all
layer pairs and the prompts. Here three models' depth tables hold m and m̃ of coupling
matrices A drawn at random, and the figure's points are checked against −m averaged over
prompts and pairs with NumPy from the A themselves, and its curve against SciPy's least
squares on those points."""

from __future__ import annotations

import json

import numpy as np
import polars as pl
from scipy import optimize

from layerlaws.series.plots import generalisation_fits, plot_score_fits, score_fits
from layerlaws.series.summary import fit_points, series_fits, series_summary

LAYERS, K, PROMPTS = 3, 2, 2
SCORES = {"a": 30.0, "b": 45.0, "c": 70.0}
SCALES = {"a": 1.0, "b": 0.7, "c": 0.45}
"""The off-diagonal scale of each model's coupling matrices: its m."""


def coupling_matrices(rng: np.random.Generator, scale: float) -> np.ndarray:
    """(prompts, L, L, K, K) coupling matrices: a diagonal near 1 and off-diagonal
    entries of ``scale``."""
    shape = (PROMPTS, LAYERS, LAYERS, K, K)
    off = scale * rng.normal(size=shape)
    diagonal = np.eye(K) * rng.uniform(0.5, 1.5, size=shape)
    return np.where(np.eye(K, dtype=bool), diagonal, off)


def depth_table(matrices: np.ndarray) -> pl.DataFrame:
    """depth.csv of the trained weights (and a random twin the summary must skip): per
    prompt and pair m̃ (paper) and m (unnormalised) of each A by Eq. 14 and 13, and the
    ``mean`` rows over prompts as the coupling job writes them."""
    off_norm = np.linalg.norm(matrices * (1 - np.eye(K)), axis=(-2, -1))
    metrics = {
        "paper": off_norm / np.linalg.norm(matrices, axis=(-2, -1)),
        "unnormalised": off_norm,
    }
    rows = []
    for weights, shift in (("trained", 0.0), ("random", 5.0)):
        for metric, values in metrics.items():
            per_prompt = {str(p): values[p] for p in range(PROMPTS)} | {"mean": values.mean(0)}
            for prompt, block in per_prompt.items():
                for a in range(LAYERS):
                    for b in range(LAYERS):
                        value = float(block[a, b]) + shift
                        rows.append((weights, prompt, a + 1, b + 1, K, metric, value))
    return pl.DataFrame(
        rows,
        schema=["weights", "prompt", "layer_a", "layer_b", "k", "metric", "miscoupling"],
        orient="row",
    )


def test_fig_8_fits_the_scores_against_m_averaged_over_pairs_and_prompts(tmp_path):
    rng = np.random.default_rng(3)
    members, reference = [], {}
    for model, scale in SCALES.items():
        matrices = coupling_matrices(rng, scale)
        folder = tmp_path / model
        folder.mkdir()
        depth_table(matrices).write_csv(folder / "depth.csv")
        facts = {
            "parameters": 1000,
            "num_layers": LAYERS,
            "hidden_size": 8,
            "model_type": "llama",
            "source": {"kind": "local"},
        }
        (folder / "facts.json").write_text(json.dumps(facts))
        members.append(
            {
                "model": model,
                "x": None,
                "facts": str(folder / "facts.json"),
                "scores": {"board": SCORES[model]},
                "law": {},
                "evaluation": {},
                "depth": str(folder / "depth.csv"),
                "trajectories": None,
                "rcos": None,
            }
        )
        # §5.4: m(A) = ‖A − Diag A‖_F per prompt and pair, averaged over l, l′ and prompts.
        m = np.sqrt(((matrices * (1 - np.eye(K))) ** 2).sum(axis=(-2, -1)))
        reference[model] = -m.mean()
    summary = series_summary(members, "parameters", "model")
    fits = series_fits(summary)
    (curve,) = score_fits(fits).filter(pl.col("form") == "exponential").iter_rows(named=True)
    assert (curve["metric"], curve["predictor"], curve["pairs"]) == (
        "unnormalised",
        f"coupling_k{K}_unnormalised",
        "all",
    )
    points = fit_points(summary, curve["predictor"], "score_board", None)
    np.testing.assert_allclose(points["x"].to_numpy(), list(reference.values()), rtol=1e-12)
    np.testing.assert_allclose(points["y"].to_numpy(), list(SCORES.values()))
    # m̃ would have given other points: the test tells the two apart.
    paper = fit_points(summary, f"coupling_k{K}", "score_board", None)["x"].to_numpy()
    assert not np.allclose(paper, points["x"].to_numpy(), rtol=0.01)

    # The curve: SciPy's least squares of score = A exp(B x) on the reference points,
    # started from the line of ln score.
    xs, ys = np.array(list(reference.values())), np.array(list(SCORES.values()))
    slope, intercept = np.polyfit(xs, np.log(ys), 1)
    found = optimize.least_squares(
        lambda p: p[0] * np.exp(p[1] * xs) - ys, x0=[np.exp(intercept), slope], xtol=1e-15
    )
    np.testing.assert_allclose([curve["amplitude"], curve["rate"]], found.x, rtol=1e-6)
    # Fig. 1a's lines take the same coupling.
    (line,) = generalisation_fits(fits, "linear").iter_rows(named=True)
    assert line["predictor"] == f"coupling_k{K}_unnormalised"

    path = tmp_path / "fits.svg"
    plot_score_fits(
        summary, fits, path=path, title="t", options={"width": 8.0, "format": "svg", "dpi": 50}
    )
    assert path.stat().st_size > 1000


def test_without_m_the_figures_take_m_tilde():
    fits = pl.DataFrame(
        {
            "subset": ["all", "all", "all"],
            "predictor": ["coupling_k2", "coupling_k2", "coupling_offdiagonal_k2"],
            "metric": ["paper", "paper", "paper"],
            "pairs": ["all", "all", "offdiagonal"],
            "form": ["exponential", "linear", "linear"],
        }
    )
    assert generalisation_fits(fits, "exponential")["predictor"].to_list() == ["coupling_k2"]
    assert generalisation_fits(fits, "linear")["pairs"].to_list() == ["all"]
