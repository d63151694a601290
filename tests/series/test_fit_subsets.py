"""Aubry et al. Table 4 and Fig. 9 on synthetic series: fits over named subsets of a
series' members (``series.<key>.fit_subsets``) against ``scipy.stats.linregress`` over the
members each subset names here by hand, the bounds at their edges and unbounded, bad
subsets; the models' training tokens as a summary column and as the x of a series."""

from __future__ import annotations

import copy
import json

import numpy as np
import polars as pl
import pytest
from scipy import stats

from layerlaws.core.errors import LayerlawsError
from layerlaws.core.settings import check_value
from layerlaws.pipeline.expansion import expand_models, series_members
from layerlaws.series.settings import SeriesSettings
from layerlaws.series.summary import series_fits, series_summary, subset_rows
from layerlaws.series.workflow import check_series

MODELS = [f"m{i}" for i in range(9)]
SUBSETS = {
    # m1 lies on the lower bound (out), m6 on the upper (in).
    "7b": {"parameters": [6.0e9, 8.0e9]},
    # m1 scores 45 exactly: out of "> 45"; no upper bound.
    "above-45": {"score_board": [45, None]},
    # Both bounds open: the members with a value (m1 has none).
    "with-tokens": {"training_tokens": [None, None]},
    # One model: too few for any fit.
    "largest": {"parameters": [5.0e10, None]},
}
MEMBERS_IN_FITS = {
    "7b": ["m2", "m3", "m5", "m6"],
    "above-45": ["m2", "m3", "m5", "m7", "m8"],
    "with-tokens": ["m0", "m2", "m3", "m5", "m6", "m7", "m8"],
    "largest": [],
}
"""The members of each subset with ``in_fits`` (m4 is left out of the fits), by hand."""


def synthetic_summary() -> pl.DataFrame:
    rng = np.random.default_rng(41)
    miscoupling = rng.uniform(0.5, 0.9, size=9)
    return pl.DataFrame(
        {
            "model": MODELS,
            "dataset": ["d"] * 9,
            "in_fits": [True] * 4 + [False] + [True] * 4,
            "parameters": [1e9, 6e9, 6.2e9, 6.5e9, 6.9e9, 7e9, 8e9, 9e9, 7e10],
            "num_layers": [12, 32, 32, 32, 32, 32, 32, 28, 80],
            "hidden_size": [2048, 4096, 4096, 4096, 4544, 4096, 3072, 3072, 8192],
            "training_tokens": [5e10, None, 3e11, 1e12, 1e12, 2e12, 2e12, 6e12, 1.5e13],
            "miscoupling_all_k10": miscoupling,
            "loss": rng.uniform(2.0, 3.0, size=9),
            "score_board": [30.0, 45.0, 50.0, 62.0, 47.0, 70.0, 41.0, 66.0, 55.0],
        }
    )


def test_subset_fits_are_linregress_over_the_subsets_members():
    summary = synthetic_summary()
    fits = series_fits(summary, SUBSETS)
    assert fits.filter(pl.col("subset") == "all").equals(series_fits(summary))
    assert fits["subset"].unique(maintain_order=True).to_list() == [
        "all",
        "7b",
        "above-45",
        "with-tokens",
    ]
    predictors = {
        "coupling_k10": lambda rows: -rows["miscoupling_all_k10"].to_numpy(),
        "log10_parameters": lambda rows: np.log10(rows["parameters"].to_numpy()),
        "num_layers": lambda rows: rows["num_layers"].to_numpy(),
        "hidden_size": lambda rows: rows["hidden_size"].to_numpy(),
    }
    for name, members in MEMBERS_IN_FITS.items():
        rows = summary.filter(pl.col("model").is_in(members))
        linear = fits.filter((pl.col("subset") == name) & (pl.col("form") == "linear"))
        found, expected = [], []
        for fit in linear.iter_rows(named=True):
            x = predictors[fit["predictor"]](rows)
            y = rows[fit["generalisation"]].to_numpy()
            reference = stats.linregress(x, y)
            found.append([fit["slope"], fit["intercept"], fit["r2"], fit["p_value"], fit["n"]])
            expected.append(
                [
                    reference.slope,
                    reference.intercept,
                    reference.rvalue**2,
                    reference.pvalue,
                    len(x),
                ]
            )
        # Score and loss against coupling, the score against size (7b: its members have
        # one depth, so no depth fit) and the others against width as well.
        assert len(found) == {"7b": 4, "largest": 0}.get(name, 5), name
        np.testing.assert_allclose(np.array(found), np.array(expected), rtol=1e-10)
        exponential = fits.filter((pl.col("subset") == name) & (pl.col("form") == "exponential"))
        assert exponential["n"].to_list() == ([len(members)] if members else [])


@pytest.mark.parametrize(
    ("bounds", "selected"),
    [
        ([2.0, 4.0], [3.0, 4.0]),
        ([2.0, None], [3.0, 4.0, 5.0]),
        ([None, 2.0], [1.0, 2.0]),
        ([None, None], [1.0, 2.0, 3.0, 4.0, 5.0]),
    ],
)
def test_bounds_keep_lower_exclusive_upper_inclusive_and_no_null(bounds, selected):
    summary = pl.DataFrame({"model": list("abcdef"), "v": [1.0, 2.0, 3.0, 4.0, None, 5.0]})
    assert subset_rows(summary, {"v": bounds}, "s")["v"].to_list() == selected


def test_a_subset_of_an_unknown_or_non_numeric_column_names_the_columns():
    summary = synthetic_summary()
    for column in ("score_leaderboard", "model"):
        with pytest.raises(LayerlawsError) as error:
            series_fits(summary, {"top": {column: [45, None]}})
        assert f"fit_subsets.top bounds '{column}'" in str(error.value)
        assert "'parameters', " in str(error.value) and "'score_board'" in str(error.value)


def test_fit_subsets_settings_and_their_checks():
    block = {"x": "label", "exclude_from_fits": [], "fit_subsets": SUBSETS}
    assert SeriesSettings.from_config(block).fit_subsets == SUBSETS
    for bad in ({"7b": {"parameters": [6.0e9]}}, {"7b": {"parameters": ["6.0e9", None]}}):
        with pytest.raises(LayerlawsError, match=r"series\.\*\.fit_subsets\.7b\.parameters"):
            check_value(bad, "series.*.fit_subsets")
    config = {
        "datasets": {},
        "signatures": {"pools": {}},
        "coupling": {"prompts": {}},
        "series": {
            "s": {
                "models": ["gpt2"],
                "x": "label",
                "datasets": [],
                "prompts": None,
                "signatures": None,
                "exclude_from_fits": [],
                "fit_subsets": {"all": {"parameters": [None, None]}},
            }
        },
    }
    with pytest.raises(LayerlawsError, match="fit_subsets names a subset 'all'"):
        check_series(config)


def test_training_tokens_are_a_summary_column_and_a_series_x(tmp_path):
    facts = {
        "parameters": 1000,
        "num_layers": 2,
        "hidden_size": 8,
        "model_type": "llama",
        "source": {"kind": "local"},
    }
    (tmp_path / "facts.json").write_text(json.dumps(facts))
    members = [
        {
            "model": model,
            "x": None,
            "facts": str(tmp_path / "facts.json"),
            "scores": {},
            "training_tokens": tokens,
            "law": {},
            "evaluation": {},
            "depth": None,
            "trajectories": None,
            "rcos": None,
        }
        for model, tokens in (("a", 2_000_000_000_000), ("b", None), ("c", 54_000_000_000))
    ]
    summary = series_summary(members, "parameters", "model")
    assert summary["training_tokens"].to_list() == [2_000_000_000_000, None, 54_000_000_000]
    unknown = [member | {"training_tokens": None} for member in members]
    assert "training_tokens" not in series_summary(unknown, "parameters", "model").columns

    hub = {"kind": "hub", "id": "x"}
    config = {
        "models": {
            "llama": {"source": hub, "training_tokens": 2_000_000_000_000},
            "phi": {"source": hub, "training_tokens": 54_000_000_000},
            "gpt2": {"source": hub},
        },
        "training": {},
        "series": {"fig9": {"models": ["phi", "llama"], "x": "tokens"}},
    }
    models = expand_models(config, lambda training, step: "")
    members = series_members(config, models, "fig9")
    assert [(m.model, m.x) for m in members] == [("phi", 54_000_000_000), ("llama", 2 * 10**12)]
    config["series"]["fig9"]["models"].append("gpt2")
    with pytest.raises(LayerlawsError, match="'gpt2' is not a training checkpoint and has no"):
        series_members(config, models, "fig9")
    revised = copy.deepcopy(config)
    revised["models"]["llama"]["revisions"] = ["step0", "step512"]
    with pytest.raises(LayerlawsError, match=r"models\.llama\.training_tokens: each of its"):
        expand_models(revised, lambda training, step: "")
