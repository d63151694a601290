"""Independent references for the series tables of a real Snakemake run: every column of
``results/series/{series}/summary.csv`` recomputed with polars/NumPy/SciPy from the
per-model outputs it aggregates, and ``fits.csv`` against ``scipy.stats.linregress``.

The run is the series run of tests/series/conftest.py, shared with test_series.py; these
references check its training series ``tiny`` (a tiny Llama trained from scratch,
checkpoints at steps 0, 2 and 8, each measured like any model: the law on ``mini``,
held-out loss, coupling and trajectories on ``few``, signatures on its own training
corpus), whose summary depends on its own members only. References:
- ``parameters``, ``num_layers``, ``hidden_size``: the checkpoint's safetensors and
  config.json; ``step``, ``tokens_seen``: its checkpoint.json;
- the law (``rho``, ``pearson``, ``pr_first``, ``pr_last``, ``overall_decay``):
  ``scipy.stats.linregress`` of log PR over layers 1…L of ``pr.csv`` (offset +1, norm
  ``model``, no control);
- ``loss``, ``perplexity``, ``accuracy``: the evaluation csv (perplexity = e^loss);
  ``bits_per_byte``, ``bits_per_character``: its loss × ``n_predictions`` / ln 2 /
  ``n_bytes`` (``n_characters``); ``tokenizer``: its fingerprint;
- ``miscoupling_all_k{K}`` / ``miscoupling_offdiagonal_k{K}``: the mean over prompts of
  the mean m̃ over all L² layer pairs / the pairs l ≠ l′, from the per-prompt rows of
  ``depth.csv`` (trained weights; the paper's metric where a ``metric`` column exists);
- ``{lss,expodistance,equidistance_cv}_{mean,median}[_random]``: NumPy means and medians
  over the trained (random: the step-0 checkpoint's) rows of ``trajectories/tokens.csv``;
- ``in_fits``: true (the series excludes nothing);
- ``rcos_we_next``, ``rcos_wu_pre``: the (W_E, next) and (W_U, pre) rows of ``rcos.csv``.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import polars as pl
import pytest
from differences import Differences
from safetensors.numpy import load_file
from scipy import stats

pytestmark = pytest.mark.slow

STEPS = [0, 2, 8]
"""Checkpoints of the training ``tiny``."""
KS = [2, 4]
"""``coupling.ks`` of the series config."""
STRING_KEYS = {"prompt": pl.String, "tokenizer": pl.String}


def paper_rows(table: pl.DataFrame) -> pl.DataFrame:
    """The rows of the paper's metric when the table has a ``metric`` column."""
    return table.filter(pl.col("metric") == "paper") if "metric" in table.columns else table


def model_reference(results: Path, step: int) -> dict[str, float]:
    """What the summary row of checkpoint ``step`` must hold, computed from its outputs."""
    model = f"tiny@step{step}"
    folder = results / f"training/tiny/checkpoints/step_{step:06d}"
    weights = load_file(folder / "model.safetensors")
    config = json.loads((folder / "config.json").read_text())
    checkpoint = json.loads((folder / "checkpoint.json").read_text())
    row = {
        "model": model,
        "x": step,
        "dataset": "mini",
        "in_fits": True,
        "probe": "next_token",
        "parameters": sum(array.size for array in weights.values()),
        "num_layers": config["num_hidden_layers"],
        "hidden_size": config["hidden_size"],
        "step": checkpoint["step"],
        "tokens_seen": checkpoint["tokens_seen"],
    }
    pr = (
        pl.read_csv(results / f"equilearning/{model}/mini/pr.csv")
        .filter(
            (pl.col("offset") == 1)
            & (pl.col("norm") == "model")
            & (pl.col("control") == "none")
            & (pl.col("layer") >= 1)
        )
        .sort("layer")
    )
    fit = stats.linregress(pr["layer"].to_numpy(), np.log(pr["pr"].to_numpy()))
    first, last = pr["pr"][0], pr["pr"][-1]
    row |= {
        "rho": np.exp(fit.slope),
        "pearson": fit.rvalue,
        "pr_first": first,
        "pr_last": last,
        "overall_decay": last / first,
    }
    evaluation = pl.read_csv(
        results / f"evaluation/{model}/mini.csv", schema_overrides=STRING_KEYS
    ).row(0, named=True)
    bits = evaluation["loss"] * evaluation["n_predictions"] / np.log(2)
    row |= {
        "loss": evaluation["loss"],
        "perplexity": np.exp(evaluation["loss"]),
        "accuracy": evaluation["accuracy"],
        "bits_per_byte": bits / evaluation["n_bytes"],
        "bits_per_character": bits / evaluation["n_characters"],
        "tokenizer": evaluation["tokenizer"],
    }
    # The series config measures the geometry of this training's runs: its last layer
    # (layer L = num_layers) and its CKA with the previous layer averaged over 1..L.
    geometry = pl.read_csv(results / f"equilearning/{model}/mini/observers/geometry.csv")
    at_last = geometry.filter(pl.col("layer") == config["num_hidden_layers"]).row(0, named=True)
    row |= {
        f"{name}_last": at_last[name]
        for name in ("effective_rank", "alpha_req", "dataset_entropy", "anisotropy")
    }
    previous = geometry.filter(pl.col("layer") > 0)["cka_previous"].to_numpy()
    row["cka_previous_mean"] = previous.mean()
    depth = paper_rows(
        pl.read_csv(results / f"coupling/{model}/few/depth.csv", schema_overrides=STRING_KEYS)
    ).filter((pl.col("weights") == "trained") & (pl.col("prompt") != "mean"))
    for k in KS:
        block = depth.filter(pl.col("k") == k)
        per_prompt = [
            (
                part["miscoupling"].to_numpy().mean(),
                part.filter(pl.col("layer_a") != pl.col("layer_b"))["miscoupling"]
                .to_numpy()
                .mean(),
            )
            for _, part in block.group_by("prompt")
        ]
        assert block.height == len(per_prompt) * config["num_hidden_layers"] ** 2
        row[f"miscoupling_all_k{k}"] = np.mean([every for every, _ in per_prompt])
        row[f"miscoupling_offdiagonal_k{k}"] = np.mean([off for _, off in per_prompt])
    tokens = pl.read_csv(
        results / f"coupling/{model}/few/trajectories/tokens.csv", schema_overrides=STRING_KEYS
    )
    for weights, suffix in (("trained", ""), ("random", "_random")):
        twin = tokens.filter(pl.col("weights") == weights)
        for column in ("lss", "expodistance", "equidistance_cv"):
            row[f"{column}_mean{suffix}"] = np.mean(twin[column].to_numpy())
            row[f"{column}_median{suffix}"] = np.median(twin[column].to_numpy())
    (rcos_path,) = (results / f"signatures/{model}").glob("*/rcos.csv")
    rcos = {(m, s): r for m, s, r, _ in pl.read_csv(rcos_path).iter_rows()}
    row |= {"rcos_we_next": rcos[("W_E", "next")], "rcos_wu_pre": rcos[("W_U", "pre")]}
    return row


def test_summary_columns_are_the_aggregates_of_the_model_outputs(series_run):
    results = series_run / "results"
    summary = pl.read_csv(results / "series/tiny/summary.csv", schema_overrides=STRING_KEYS)
    expected = [model_reference(results, step) for step in STEPS]
    assert summary["model"].to_list() == [row["model"] for row in expected]
    other_metrics = {
        column
        for column in summary.columns
        if column.startswith("miscoupling_") and column.count("_") > 2
    }
    assert set(summary.columns) - other_metrics == set(expected[0]), set(summary.columns) ^ set(
        expected[0]
    )
    differences = Differences()
    for row, reference in zip(summary.iter_rows(named=True), expected, strict=True):
        for column, value in reference.items():
            if isinstance(value, str | bool):
                assert row[column] == value, (column, row[column], value)
            else:
                differences.add(column, row[column], value)
    print(differences.check("series summary.csv", rtol=1e-9, atol=1e-9))


def test_fits_are_scipy_linregress_of_loss_on_coupling(series_run):
    """fits.csv: per K and pairs, held-out loss on ``mini`` against coupling =
    −miscoupling_all_k{K} (all layer pairs) and −miscoupling_offdiagonal_k{K} (l ≠ l′)
    over the three checkpoints: slope, intercept, R² = r², two-sided p of the slope, n
    (the paper's metric's rows where fits.csv has a ``metric`` column; other metrics'
    summary columns carry a suffix and are left to their own tests)."""
    results = series_run / "results/series/tiny"
    summary = pl.read_csv(results / "summary.csv")
    fits = paper_rows(pl.read_csv(results / "fits.csv"))
    assert sorted(fits.select("k", "pairs").rows()) == sorted(
        (k, pairs) for k in KS for pairs in ("all", "offdiagonal")
    )
    assert set(fits["generalisation"]) == {"loss"} and set(fits["form"]) == {"linear"}
    differences = Differences()
    for row in fits.iter_rows(named=True):
        name = "" if row["pairs"] == "all" else "offdiagonal_"
        assert row["predictor"] == f"coupling_{name}k{row['k']}" and row["dataset"] == "mini"
        x = -summary[f"miscoupling_{row['pairs']}_k{row['k']}"].to_numpy()
        fit = stats.linregress(x, summary["loss"].to_numpy())
        assert row["n"] == len(x)
        for column, value in (
            ("slope", fit.slope),
            ("intercept", fit.intercept),
            ("r2", fit.rvalue**2),
            ("p_value", fit.pvalue),
        ):
            differences.add(column, row[column], value)
    print(differences.check("series fits.csv", rtol=1e-9, atol=1e-9))
