"""The law fit on synthetic prediction residuals."""

import numpy as np
import polars as pl
import pytest
import scipy.stats

from layerlaws.equilearning.law import best_datasets, fit_law, law_table


def test_exactly_geometric_pr():
    layers = np.arange(1, 25)
    pr = 0.9 * 0.97**layers
    fit = fit_law(layers, pr)
    assert fit.rho == pytest.approx(0.97, rel=1e-12)
    assert fit.pearson == pytest.approx(-1.0, abs=1e-12)
    assert fit.overall_decay == pytest.approx(0.97**23, rel=1e-12)
    assert fit.pr_first == pytest.approx(0.9 * 0.97)


def test_noisy_geometric_pr_and_rising_pr():
    rng = np.random.default_rng(0)
    layers = np.arange(1, 31)
    noisy = 0.8 * 0.99**layers * np.exp(rng.normal(scale=0.003, size=30))
    fit = fit_law(layers, noisy)
    assert -1 < fit.pearson < -0.9
    assert fit.rho == pytest.approx(0.99, abs=1e-3)
    assert fit_law(layers, 0.2 * 1.03**layers).pearson == pytest.approx(1.0)


def test_unordered_layers_and_invalid_pr():
    assert fit_law(np.array([3, 1, 2]), np.array([0.5, 0.8, 0.6])).pr_first == 0.8
    assert np.isnan(fit_law(np.array([1, 2, 3]), np.array([0.5, 0.0, 0.4])).rho)


def test_law_table_ignores_layer_zero_and_groups_keys():
    rows = []
    for norm in ("model", "none"):
        for layer in range(0, 6):
            rows.append(
                {
                    "layer": layer,
                    "offset": 1,
                    "norm": norm,
                    "control": "none",
                    "pr": 0.5 if layer == 0 else 0.9**layer,
                    "n_rows": 10,
                }
            )
    table = law_table(pl.DataFrame(rows))
    assert table.columns == [
        "offset",
        "norm",
        "control",
        "rho",
        "pearson",
        "pr_first",
        "pr_last",
        "overall_decay",
        "intercept",
        "slope",
    ]
    assert len(table) == 2
    assert table["rho"].to_list() == pytest.approx([0.9, 0.9])
    # The line the figures draw: log PR = intercept + slope · layer (PR_l = 0.9^l).
    assert table["slope"].to_list() == pytest.approx([np.log(0.9)] * 2)
    assert table["intercept"].to_list() == pytest.approx([0.0, 0.0], abs=1e-12)


def test_best_datasets_rank_each_model_by_its_strongest_law():
    rows = []
    for model, dataset, pearson in [("a", "x", -0.9), ("a", "y", -0.99), ("b", "x", -0.5)]:
        for norm in ("model", "none"):
            rows.append(
                {
                    "model": model,
                    "dataset": dataset,
                    "offset": 1,
                    "norm": norm,
                    "control": "none",
                    "rho": 0.9,
                    "pearson": pearson if norm == "model" else 0.0,
                }
            )
    rows.append({**rows[0], "offset": 0, "pearson": -1.0})
    ranked = best_datasets(pl.DataFrame(rows))
    assert ranked.select("model", "rank", "dataset", "chosen").rows() == [
        ("a", 1, "y", True),
        ("a", 2, "x", False),
        ("b", 1, "x", True),
    ]


def test_law_table_fits_every_layer_from_one_on_a_curved_pr():
    """A PR curve that is not exactly geometric (a bend at the first layers, as real models
    show), so that each layer changes the fit: every statistic of ``law_table`` against
    scipy's linregress of log PR over layers 1…L, layer 0 left out. Leaving layer 1 out
    too would move the slope by far more than the tolerance."""
    layers = np.arange(0, 13)
    pr = 0.95**layers * (1 + 0.3 * np.exp(-layers / 2.0)) * (1 + 0.01 * np.sin(layers))
    table = law_table(
        pl.DataFrame(
            {
                "layer": layers,
                "offset": 1,
                "norm": "model",
                "control": "none",
                "pr": pr,
                "n_rows": 100,
            }
        )
    )
    fit = scipy.stats.linregress(layers[1:], np.log(pr[1:]))
    without_first = scipy.stats.linregress(layers[2:], np.log(pr[2:]))
    assert abs(without_first.slope - fit.slope) > 1e-3
    expected = [
        np.exp(fit.slope),
        fit.rvalue,
        pr[1],
        pr[-1],
        pr[-1] / pr[1],
        fit.intercept,
        fit.slope,
    ]
    found = table.select(
        "rho", "pearson", "pr_first", "pr_last", "overall_decay", "intercept", "slope"
    ).row(0)
    np.testing.assert_allclose(found, expected, rtol=1e-10, atol=1e-12)
