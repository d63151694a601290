"""Series through Snakemake on tiny models: a model trained from scratch (three
checkpoints) measured as a series, a series of models with external scores, their
summaries, fits, held-out evaluation, what reruns when a model is added or left out of
the fits, bad input; the fits (linear, exponential, against size) against references
written here."""

from __future__ import annotations

import copy
import json
import shutil

import numpy as np
import polars as pl
import pytest
import torch
from scipy import optimize, stats
from snakemake.exceptions import WorkflowError
from snakemake_runs import dry_run, run_ok, scheduled_jobs, snakemake, write_config

from layerlaws.core.errors import LayerlawsError
from layerlaws.pipeline.expansion import expand_models, series_members, series_runs
from layerlaws.series.plots import member_quantities, plot_members
from layerlaws.series.summary import (
    coupling_columns,
    excluded_members,
    exponential_fit,
    linear_fit,
    series_fits,
    series_summary,
    trajectory_columns,
)

pytestmark = pytest.mark.slow


SUMMARY_COLUMNS = [
    "model",
    "x",
    "dataset",
    "in_fits",
    "probe",
    "parameters",
    "num_layers",
    "hidden_size",
    "rho",
    "pearson",
    "pr_first",
    "pr_last",
    "overall_decay",
    "loss",
    "perplexity",
    "accuracy",
    "bits_per_byte",
    "bits_per_character",
    "tokenizer",
    "miscoupling_all_k2",
    "miscoupling_offdiagonal_k2",
    "miscoupling_all_k4",
    "miscoupling_offdiagonal_k4",
    "miscoupling_all_k2_released_trace",
    "miscoupling_offdiagonal_k2_released_trace",
    "miscoupling_all_k4_released_trace",
    "miscoupling_offdiagonal_k4_released_trace",
    *(
        f"{measure}_{statistic}{twin}"
        for twin in ("", "_random")
        for measure in ("lss", "expodistance", "equidistance_cv")
        for statistic in ("mean", "median")
    ),
]


def test_training_series_summary(series_run):
    results = series_run / "results"
    summary = pl.read_csv(results / "series/tiny/summary.csv")
    assert set([*SUMMARY_COLUMNS, "step", "tokens_seen", "rcos_we_next", "rcos_wu_pre"]) <= set(
        summary.columns
    )
    assert summary.columns[:3] == ["model", "x", "dataset"]
    assert summary["model"].to_list() == ["tiny@step0", "tiny@step2", "tiny@step8"]
    assert summary["x"].to_list() == [0, 2, 8] == summary["step"].to_list()
    assert summary["tokens_seen"].to_list() == [0, 2 * 64, 8 * 64]
    assert summary["loss"][-1] < summary["loss"][0]
    curve = pl.read_csv(results / "training/tiny/curve.csv")
    assert curve.columns == ["step", "tokens_seen", "learning_rate", "train_loss", "held_out_loss"]
    assert curve["step"].to_list() == list(range(9))
    checkpoints = pl.read_csv(results / "training/tiny/checkpoints.csv")
    assert checkpoints["step"].to_list() == [0, 2, 8]
    for name in ("curve.svg",):
        assert (results / "training/tiny" / name).stat().st_size > 1000
    for name in ("quantities.svg", "members.svg", "generalisation.svg", "fits.svg"):
        assert (results / "series/tiny" / name).stat().st_size > 1000
    # Step 0 is its own random twin; later checkpoints keep that twin.
    twins = summary.select("lss_mean", "lss_mean_random", "expodistance_median_random")
    assert twins["lss_mean"][0] == pytest.approx(twins["lss_mean_random"][0])
    assert twins["lss_mean_random"].n_unique() == 1
    assert twins["lss_mean"][-1] != pytest.approx(twins["lss_mean_random"][-1])
    assert summary["in_fits"].to_list() == [True] * 3
    facts = json.loads((results / "models/tiny@step2/layerlaws_model.json").read_text())
    assert facts["source"]["step"] == 2 and facts["source"]["tokens_seen"] == 128
    assert facts["num_layers"] == 2 and facts["hidden_size"] == 16


def test_the_training_series_measures_geometry_as_an_observer_run_here(series_run):
    """``equilearning.observers: [{name: geometry, models: [tiny]}]``: each checkpoint's run
    writes ``observers/geometry.csv``, equal to a GeometryObserver run in this process over
    the run's tokens in the same batches, and its figure; the summary takes its last layer
    and mean CKA; the other series' models measure none."""
    from layerlaws.forward.model_pass import run_forward_pass
    from layerlaws.geometry.observer import GeometryObserver
    from layerlaws.geometry.settings import GeometrySettings
    from layerlaws.models.facts import read_facts
    from layerlaws.models.loading import load_model

    results = series_run / "results"
    summary = pl.read_csv(results / "series/tiny/summary.csv")
    for model in ("tiny@step0", "tiny@step8"):
        folder = results / "models" / model
        facts = read_facts(folder)
        tokens = pl.read_parquet(results / f"tokens/{model}/mini.parquet")
        observer = GeometryObserver(GeometrySettings(), facts.num_layers)
        run = load_model(folder, "float32", "cpu")
        run_forward_pass(run, facts, tokens, [observer], 8, "cpu", progress=False)
        expected = observer.table()
        found = pl.read_csv(results / f"equilearning/{model}/mini/observers/geometry.csv")
        assert found.columns == expected.columns and found.height == facts.num_layers + 1
        assert np.isfinite(expected["effective_rank"].to_numpy()).all()
        for column in expected.columns:
            np.testing.assert_allclose(
                found[column].to_numpy(), expected[column].to_numpy(), rtol=1e-9, err_msg=column
            )
        assert (results / f"equilearning/{model}/mini/geometry.svg").stat().st_size > 1000
        row = summary.filter(pl.col("model") == model).row(0, named=True)
        last = expected.row(facts.num_layers, named=True)
        for name in ("effective_rank", "alpha_req", "dataset_entropy", "anisotropy"):
            assert row[f"{name}_last"] == pytest.approx(last[name], rel=1e-9), name
        mean = expected["cka_previous"][1:].mean()
        assert row["cka_previous_mean"] == pytest.approx(mean, rel=1e-9)
    family = pl.read_csv(results / "series/family/summary.csv")
    assert "effective_rank_last" not in family.columns
    assert not list((results / "equilearning/tiny-llama/mini/observers").glob("*.csv"))
    assert not (results / "equilearning/tiny-llama/mini/geometry.svg").exists()


def test_changing_the_geometry_reruns_only_the_passes_that_measure_it(
    series_run, series_config, tmp_path
):
    """A geometry setting is a param of the passes that measure it (the three checkpoints'
    runs), not of the others."""
    config = copy.deepcopy(series_config)
    config["equilearning"]["geometry"] = {"entropy_alpha": 2.0}
    jobs = scheduled_jobs(series_run, configfile=write_config(tmp_path, config))
    assert jobs["equilearning_pass"] == 3 and jobs["plot_geometry"] == 3, jobs


def test_checkpoints_share_counts_and_couple_against_their_initialisation(series_run):
    results = series_run / "results"
    # The training corpus is counted once, over the sequences the training read
    # (signatures.own_corpus_counts: trained), not per checkpoint nor from the whole
    # source, and is the texts the probing dataset did not sample.
    assert (results / "training/tiny/counts/unigrams.parquet").is_file()
    assert not (results / "signatures/tiny-llama/rest/unigrams.parquet").exists()
    assert not (results / "signatures/tiny@step0/rest/unigrams.parquet").exists()
    probed = set(pl.read_parquet(results / "corpus/mini/sentences.parquet")["source"])
    trained = set(pl.read_parquet(results / "corpus/rest/sentences.parquet")["source"])
    assert not probed & trained and len(probed | trained) == 80
    # The step-0 checkpoint is its own initialisation: trained and random coincide.
    depth = pl.read_csv(
        results / "coupling/tiny@step0/few/depth.csv", schema_overrides={"prompt": pl.String}
    )
    trained_rows = depth.filter(pl.col("weights") == "trained")["miscoupling"]
    random_rows = depth.filter(pl.col("weights") == "random")["miscoupling"]
    assert np.allclose(trained_rows.to_numpy(), random_rows.to_numpy())
    later = pl.read_csv(
        results / "coupling/tiny@step8/few/depth.csv", schema_overrides={"prompt": pl.String}
    )
    assert np.allclose(
        later.filter(pl.col("weights") == "random")["miscoupling"].to_numpy(),
        random_rows.to_numpy(),
    )


def test_held_out_loss_equals_the_model_own_loss(series_run):
    """results/evaluation/{model}/{dataset}.csv against ``model(input_ids, labels=…)`` on
    the same tokens: labels of special tokens, of padding, and of a text token following a
    special token are ignored (-100)."""
    from transformers import AutoModelForCausalLM

    results = series_run / "results"
    for model in ("tiny@step8", "tiny-gpt2"):
        facts = json.loads((results / f"models/{model}/layerlaws_model.json").read_text())
        folder = facts["weights"] or str(results / "models" / model)
        network = AutoModelForCausalLM.from_pretrained(folder).eval()
        tokens = pl.read_parquet(results / f"tokens/{model}/mini.parquet").sort(
            "sentence_id", "position"
        )
        sequences = [part for _, part in tokens.group_by("sentence_id", maintain_order=True)]
        width = max(len(part) for part in sequences)
        ids = torch.zeros((len(sequences), width), dtype=torch.long)
        labels = torch.full((len(sequences), width), -100, dtype=torch.long)
        mask = torch.zeros((len(sequences), width), dtype=torch.long)
        for row, part in enumerate(sequences):
            token_ids = torch.tensor(part["token_id"].to_list())
            special = part["is_special"].to_list()
            ids[row, : len(part)], mask[row, : len(part)] = token_ids, 1
            for t in range(1, len(part)):
                if not special[t] and not special[t - 1]:
                    labels[row, t] = token_ids[t]
        with torch.no_grad():
            direct = network(input_ids=ids, attention_mask=mask, labels=labels).loss.item()
        evaluation = pl.read_csv(results / f"evaluation/{model}/mini.csv")
        assert evaluation.columns == [
            "n_predictions",
            "n_bytes",
            "n_characters",
            "loss",
            "perplexity",
            "accuracy",
            "bits_per_byte",
            "bits_per_character",
            "tokenizer",
        ]
        assert evaluation["n_predictions"][0] == int((labels != -100).sum())
        assert evaluation["loss"][0] == pytest.approx(direct, rel=1e-5)
        assert evaluation["perplexity"][0] == pytest.approx(np.exp(direct), rel=1e-5)


def test_family_series_fits_scores_against_coupling(series_run):
    results = series_run / "results/series/family"
    summary = pl.read_csv(results / "summary.csv")
    assert summary["x"].to_list() == ["tiny-random", "tiny-gpt2", "tiny-llama"]
    assert summary["score_board"].to_list() == [10.0, 20.0, 30.0]
    fits = pl.read_csv(results / "fits.csv")
    assert set(fits["generalisation"]) == {"score_board", "loss"}
    assert set(fits["k"].drop_nulls()) == {2, 4}
    assert set(fits["metric"].drop_nulls()) == {"paper", "released_trace"}
    # Depth and width are the same for the three tiny models: only their size is fitted.
    size = fits.filter(pl.col("k").is_null()).row(0, named=True)
    assert fits.filter(pl.col("k").is_null()).height == 1
    assert (size["predictor"], size["form"], size["generalisation"]) == (
        "log10_parameters",
        "linear",
        "score_board",
    )
    reference = stats.linregress(
        np.log10(summary["parameters"].to_numpy()), summary["score_board"].to_numpy()
    )
    assert size["slope"] == pytest.approx(reference.slope)
    assert size["r2"] == pytest.approx(reference.rvalue**2)
    assert (results / "fits.svg").stat().st_size > 1000
    assert (results / "members.svg").stat().st_size > 1000
    # The tiny tokenizers share their vocabulary: the fits keep the loss per token.
    assert summary["tokenizer"].n_unique() == 1
    for metric, suffix in (("paper", ""), ("released_trace", "_released_trace")):
        column = f"miscoupling_all_k2{suffix}"
        # The summary's aggregate is the mean of the trained weights' prompt-mean rows.
        for model, layers, value in summary.select("model", "num_layers", column).iter_rows():
            depth = pl.read_csv(
                series_run / f"results/coupling/{model}/few/depth.csv",
                schema_overrides={"prompt": pl.String},
            )
            rows = depth.filter(
                (pl.col("weights") == "trained")
                & (pl.col("prompt") == "mean")
                & (pl.col("k") == 2)
                & (pl.col("metric") == metric)
            )
            assert len(rows) == layers**2
            assert value == pytest.approx(rows["miscoupling"].to_numpy().mean())
        rows = fits.filter(
            (pl.col("generalisation") == "score_board")
            & (pl.col("k") == 2)
            & (pl.col("metric") == metric)
            & (pl.col("pairs") == "all")
        )
        row = rows.filter(pl.col("form") == "linear").row(0, named=True)
        assert row["predictor"] == f"coupling_k2{suffix}"
        reference = stats.linregress(-summary[column].to_numpy(), summary["score_board"].to_numpy())
        assert row["slope"] == pytest.approx(reference.slope)
        assert row["r2"] == pytest.approx(reference.rvalue**2)
        assert row["p_value"] == pytest.approx(reference.pvalue)
        (curve,) = rows.filter(pl.col("form") == "exponential").iter_rows(named=True)
        assert curve["predictor"] == f"coupling_k2{suffix}" and curve["n"] == 3


def test_adding_a_model_to_a_series_reruns_only_its_chain_and_the_summary(
    series_run, series_config, llama_folder, tmp_path
):
    workdir = tmp_path / "copy"
    shutil.copytree(series_run, workdir, symlinks=True)
    config = copy.deepcopy(series_config)
    config["models"]["tiny-random-2"] = {
        "source": {"kind": "local", "path": str(llama_folder)},
        "init": "random",
        "init_seed": 2,
    }
    config["series"]["family"]["models"].append("tiny-random-2")
    write_config(workdir, config)
    jobs = scheduled_jobs(workdir)
    one_model = {
        "prepare_model": 1,
        "tokenize": 1,
        "equilearning_pass": 1,
        "fit_law": 1,
        "plot_equilearning": 1,
        "measure_coupling": 1,
        "plot_coupling": 1,
    }
    summaries = {
        "summarize_equilearning": 1,
        "plot_summary": 1,
        "summarize_series": 1,
        "plot_series": 1,
    }
    assert jobs == one_model | summaries | {"all": 1}


def test_leaving_a_model_out_of_the_fits_reruns_only_the_summaries(
    series_run, series_config, tmp_path
):
    """``exclude_from_fits`` keeps the model measured in the summary (``in_fits`` false)
    and out of every fit: with two models left, the family has nothing to fit, nor has its
    subset of them. A subset (``fit_subsets``) and a model's ``training_tokens`` are
    summary settings too."""
    workdir = tmp_path / "copy"
    shutil.copytree(series_run, workdir, symlinks=True)
    config = copy.deepcopy(series_config)
    config["series"]["family"]["exclude_from_fits"] = ["tiny-random"]
    config["series"]["family"]["fit_subsets"] = {"scored": {"score_board": [15, None]}}
    config["models"]["tiny-llama"]["training_tokens"] = 1000
    write_config(workdir, config)
    assert scheduled_jobs(workdir) == {"summarize_series": 1, "plot_series": 1, "all": 1}
    run_ok(workdir)
    results = workdir / "results/series/family"
    summary = pl.read_csv(results / "summary.csv")
    assert summary["in_fits"].to_list() == [False, True, True]
    assert summary["score_board"].to_list() == [10.0, 20.0, 30.0]
    assert summary["training_tokens"].to_list() == [None, None, 1000]
    assert pl.read_csv(results / "fits.csv").is_empty()
    before = pl.read_csv(series_run / "results/series/family/summary.csv")
    assert summary.drop("in_fits", "training_tokens").equals(before.drop("in_fits"))


def test_linear_fit_equals_scipy_linregress():
    rng = np.random.default_rng(3)
    x = rng.normal(size=12)
    y = 2.0 * x + rng.normal(scale=0.5, size=12)
    fit, reference = linear_fit(x, y), stats.linregress(x, y)
    assert fit["slope"] == pytest.approx(reference.slope, rel=1e-12)
    assert fit["intercept"] == pytest.approx(reference.intercept, rel=1e-12)
    assert fit["r2"] == pytest.approx(reference.rvalue**2, rel=1e-12)
    assert fit["p_value"] == pytest.approx(reference.pvalue, rel=1e-9)


def test_fits_need_three_models():
    summary = pl.DataFrame(
        {
            "model": ["a", "b", "c"],
            "x": [1, 2, 3],
            "dataset": [None, None, None],
            "in_fits": [True, True, False],
            "parameters": [10, 100, 1000],
            "num_layers": [2, 4, 8],
            "hidden_size": [8, 16, 32],
            "miscoupling_all_k10": [0.5, 0.6, 0.7],
            "score_s": [1.0, 2.0, 3.0],
        }
    )
    assert series_fits(summary).is_empty()
    assert len(series_fits(summary.with_columns(in_fits=True))) == 5


def exponential_reference(x: np.ndarray, y: np.ndarray) -> tuple[float, float]:
    """Least squares y = a·exp(b·x) with a in closed form for each b, a(b) = Σ y e^{bx} /
    Σ e^{2bx}, and b by a grid over [−20, 20] refined by Brent's method."""

    def best_a(b: float) -> float:
        e = np.exp(b * x)
        return float(y @ e / (e @ e))

    def loss(b: float) -> float:
        return float(np.sum((y - best_a(b) * np.exp(b * x)) ** 2))

    grid = np.linspace(-20.0, 20.0, 4001)
    b0 = grid[np.argmin([loss(b) for b in grid])]
    b = optimize.minimize_scalar(loss, bracket=(b0 - 0.01, b0, b0 + 0.01)).x
    return best_a(b), b


def test_exponential_fit_equals_a_direct_least_squares():
    rng = np.random.default_rng(5)
    x = -rng.uniform(0.4, 0.95, size=15)
    exact = exponential_fit(x, 80.0 * np.exp(1.5 * x))
    assert (exact["amplitude"], exact["rate"], exact["r2"]) == pytest.approx((80.0, 1.5, 1.0))
    y = 80.0 * np.exp(1.5 * x) + rng.normal(scale=2.0, size=15)
    fit = exponential_fit(x, y)
    a, b = exponential_reference(x, y)
    r2 = 1 - np.sum((y - a * np.exp(b * x)) ** 2) / np.sum((y - y.mean()) ** 2)
    assert fit["amplitude"] == pytest.approx(a, rel=1e-5)
    assert fit["rate"] == pytest.approx(b, rel=1e-5)
    assert fit["r2"] == pytest.approx(r2, rel=1e-8)
    assert fit["n"] == 15
    negative = exponential_fit(x, -y)
    assert (negative["amplitude"], negative["rate"]) == pytest.approx((-a, b), rel=1e-5)
    assert exponential_fit(x, y - y.mean()) is None
    flat = exponential_fit(x, np.full(15, 5.0))
    assert (flat["amplitude"], flat["rate"], flat["r2"]) == pytest.approx((5.0, 0.0, 0.0))


def test_exponential_fit_finds_the_global_least_squares_of_three_models():
    """Three points where a start from the line of ln y ends in a local minimum
    (rate −2.36, sum of squares 40 % above the least)."""
    x = np.array([-0.45839362, -0.92350278, -0.97614865])
    y = np.array([22.04921465, 27.99568102, 69.96566211])
    fit = exponential_fit(x, y)
    a, b = exponential_reference(x, y)
    assert fit["rate"] == pytest.approx(b, rel=1e-5)
    assert fit["amplitude"] == pytest.approx(a, rel=1e-4)


def test_series_fits_of_scores_against_size_and_coupling_leave_out_excluded_members():
    """Linear fits of the score on −m̃, log10 parameters, depth and width, the exponential
    fit on −m̃, and the loss on −m̃: all over the members in the fits only."""
    rng = np.random.default_rng(11)
    n = 7
    parameters = np.array([1e8, 3e8, 1e9, 2e9, 7e9, 1.3e10, 7e10])
    miscoupling = rng.uniform(0.5, 0.9, size=n)
    summary = pl.DataFrame(
        {
            "model": [f"m{i}" for i in range(n)],
            "dataset": ["d"] * n,
            "in_fits": [True, True, False, True, True, True, True],
            "parameters": parameters.astype(np.int64),
            "num_layers": [12, 24, 24, 32, 32, 40, 80],
            "hidden_size": [768, 1024, 2048, 2560, 4096, 5120, 8192],
            "miscoupling_all_k10": miscoupling,
            "miscoupling_offdiagonal_k10": rng.uniform(0.5, 0.9, size=n),
            "loss": rng.uniform(2.0, 3.0, size=n),
            "score_board": 150.0 * np.exp(-1.2 * miscoupling) + rng.normal(scale=3.0, size=n),
        }
    )
    fits = series_fits(summary)
    kept = summary.filter(pl.col("in_fits"))
    score = kept["score_board"].to_numpy()
    coupling = -kept["miscoupling_all_k10"].to_numpy()
    off_diagonal = -kept["miscoupling_offdiagonal_k10"].to_numpy()
    expected = {
        ("coupling_k10", "score_board"): coupling,
        ("coupling_k10", "loss"): coupling,
        ("coupling_offdiagonal_k10", "score_board"): off_diagonal,
        ("coupling_offdiagonal_k10", "loss"): off_diagonal,
        ("log10_parameters", "score_board"): np.log10(kept["parameters"].to_numpy()),
        ("num_layers", "score_board"): kept["num_layers"].to_numpy(),
        ("hidden_size", "score_board"): kept["hidden_size"].to_numpy(),
    }
    linear = fits.filter(pl.col("form") == "linear")
    assert len(linear) == len(expected)
    for row in linear.iter_rows(named=True):
        x = expected[(row["predictor"], row["generalisation"])]
        y = kept[row["generalisation"]].to_numpy()
        reference = stats.linregress(x, y)
        assert row["n"] == n - 1
        assert row["slope"] == pytest.approx(reference.slope, rel=1e-10)
        assert row["intercept"] == pytest.approx(reference.intercept, rel=1e-10)
        assert row["r2"] == pytest.approx(reference.rvalue**2, rel=1e-10)
        assert row["p_value"] == pytest.approx(reference.pvalue, rel=1e-8)
        pairs = {"coupling_k10": "all", "coupling_offdiagonal_k10": "offdiagonal"}
        assert (row["k"], row["metric"], row["pairs"]) == (
            (10, "paper", pairs[row["predictor"]])
            if row["predictor"] in pairs
            else (None, None, None)
        )
    (curve,) = fits.filter(pl.col("form") == "exponential").iter_rows(named=True)
    a, b = exponential_reference(coupling, score)
    assert (curve["predictor"], curve["generalisation"], curve["n"]) == (
        "coupling_k10",
        "score_board",
        n - 1,
    )
    assert curve["amplitude"] == pytest.approx(a, rel=1e-5)
    assert curve["rate"] == pytest.approx(b, rel=1e-5)
    assert curve["slope"] is None and curve["p_value"] is None


def test_fits_use_bits_per_byte_across_tokenizers_and_loss_within_one():
    """Members in the fits with two tokenizers: the held-out measure fitted against
    coupling is bits per byte; with one (a member of another tokenizer left out of the
    fits), the loss."""
    rng = np.random.default_rng(5)
    n = 5
    summary = pl.DataFrame(
        {
            "model": [f"m{i}" for i in range(n)],
            "dataset": ["d"] * n,
            "in_fits": [True] * n,
            "parameters": [100, 200, 300, 400, 500],
            "num_layers": [2] * n,
            "hidden_size": [8] * n,
            "miscoupling_all_k10": rng.uniform(0.5, 0.9, size=n),
            "loss": rng.uniform(2.0, 3.0, size=n),
            "bits_per_byte": rng.uniform(0.8, 1.2, size=n),
            "tokenizer": ["aaa", "aaa", "bbb", "aaa", "aaa"],
        }
    )
    for in_fits, measure in (
        ([True] * n, "bits_per_byte"),
        ([True, True, False, True, True], "loss"),
    ):
        rows = summary.with_columns(in_fits=pl.Series(in_fits))
        (fit,) = series_fits(rows).iter_rows(named=True)
        assert (fit["predictor"], fit["generalisation"], fit["dataset"]) == (
            "coupling_k10",
            measure,
            "d",
        )
        kept = rows.filter(pl.col("in_fits"))
        reference = stats.linregress(-kept["miscoupling_all_k10"], kept[measure])
        assert fit["slope"] == pytest.approx(reference.slope, rel=1e-10)
        assert fit["n"] == kept.height


def test_excluded_members_by_key_or_by_the_key_they_expand_from():
    models = ["pythia@step0", "pythia@step512", "gemma-1.1-7b", "gemma-7b"]
    assert excluded_members(models, ["gemma-1.1-7b"]) == {"gemma-1.1-7b"}
    assert excluded_members(models, ["pythia"]) == {"pythia@step0", "pythia@step512"}
    assert excluded_members(models, ["pythia@step0"]) == {"pythia@step0"}
    assert excluded_members(models, []) == set()
    with pytest.raises(LayerlawsError, match=r"names \['gemma-1.1-2b'\]"):
        excluded_members(models, ["gemma-1.1-7b", "gemma-1.1-2b"])


def test_trajectory_columns_are_mean_and_median_of_each_twin(tmp_path):
    rng = np.random.default_rng(2)
    n = 9
    values = {m: rng.lognormal(size=2 * n) for m in ("lss", "expodistance", "equidistance_cv")}
    tokens = pl.DataFrame(
        {
            "weights": ["trained"] * n + ["random"] * n,
            "prompt": ["0"] * 2 * n,
            "token": list(range(n)) * 2,
        }
        | values
    )
    tokens.write_csv(tmp_path / "tokens.csv")
    columns = trajectory_columns(str(tmp_path / "tokens.csv"))
    expected = {}
    for twin, rows in (("", slice(0, n)), ("_random", slice(n, 2 * n))):
        for measure, column in values.items():
            expected[f"{measure}_mean{twin}"] = np.mean(column[rows])
            expected[f"{measure}_median{twin}"] = np.median(column[rows])
    assert columns.keys() == expected.keys()
    for name, value in expected.items():
        assert columns[name] == pytest.approx(value, rel=1e-12), name


def test_summary_columns_of_every_metric_are_read_and_fitted(tmp_path):
    """A depth table of two metrics, the paper's m̃ (Eq. 14) and the unnormalised m (Eq.
    13), gives the paper's columns unsuffixed and the other's with its name; the fits
    carry the metric and its K."""
    depth = pl.DataFrame(
        {
            "weights": ["trained"] * 4 + ["random"],
            "prompt": ["mean"] * 5,
            "layer_a": [1, 1, 1, 2, 1],
            "layer_b": [1, 2, 2, 2, 2],
            "k": [3, 3, 3, 3, 3],
            "metric": ["paper", "paper", "unnormalised", "unnormalised", "paper"],
            "miscoupling": [0.0, 0.5, 1.5, 0.25, 0.9],
        }
    )
    depth.write_csv(tmp_path / "depth.csv")
    assert coupling_columns(str(tmp_path / "depth.csv")) == {
        "miscoupling_all_k3": 0.25,
        "miscoupling_offdiagonal_k3": 0.5,
        "miscoupling_all_k3_unnormalised": 0.875,
        "miscoupling_offdiagonal_k3_unnormalised": 1.5,
    }
    summary = pl.DataFrame(
        {
            "model": ["a", "b", "c"],
            "dataset": [None, None, None],
            "in_fits": [True, True, True],
            "parameters": [100, 100, 100],
            "num_layers": [2, 2, 2],
            "hidden_size": [8, 8, 8],
            "miscoupling_all_k3_unnormalised": [0.5, 0.7, 0.6],
            "score_s": [3.0, 1.0, 2.5],
        }
    )
    fit, curve = series_fits(summary).iter_rows(named=True)
    reference = stats.linregress([-0.5, -0.7, -0.6], [3.0, 1.0, 2.5])
    for row, form in ((fit, "linear"), (curve, "exponential")):
        assert (row["predictor"], row["k"], row["metric"], row["form"]) == (
            "coupling_k3_unnormalised",
            3,
            "unnormalised",
            form,
        )
    assert fit["slope"] == pytest.approx(reference.slope)


# Expansion and bad input.

BASE = {
    "models": {
        "pythia": {
            "source": {"kind": "hub", "id": "EleutherAI/pythia-1b"},
            "revisions": ["step0", "step512"],
        },
        "gpt2": {"source": {"kind": "hub", "id": "gpt2"}},
    },
    "training": {},
    "series": {},
}


def test_revisions_and_checkpoints_expand_into_models():
    config = copy.deepcopy(BASE)
    config["training"]["small"] = {"checkpoints": [0, 5], "steps": 5, "batch_size": 2, "context": 8}
    models = expand_models(config, lambda training, step: f"out/{training}/{step}")
    assert list(models) == ["pythia@step0", "pythia@step512", "gpt2", "small@step0", "small@step5"]
    assert models["pythia@step512"]["source"]["revision"] == "step512"
    assert models["small@step5"]["source"] == {
        "kind": "local",
        "path": "out/small/5",
        "training": "small",
        "step": 5,
        "tokens_seen": 80,
    }
    config["series"]["s"] = {
        "models": ["pythia", {"model": "gpt2", "x": 7}],
        "x": "step",
        "datasets": ["d"],
        "prompts": None,
        "signatures": None,
    }
    members = series_members(config, models, "s")
    assert [(m.model, m.x) for m in members] == [
        ("pythia@step0", 0),
        ("pythia@step512", 512),
        ("gpt2", 7),
    ]
    runs = series_runs(config, models)
    assert [r["model"] for r in runs.equilearning] == ["pythia@step0", "pythia@step512", "gpt2"]


@pytest.mark.parametrize(
    ("series", "message"),
    [
        (
            {"models": ["gpt3"], "x": "label"},
            "names 'gpt3', which is neither a model nor a training",
        ),
        ({"models": ["gpt2"], "x": "step"}, "no x for model 'gpt2'"),
        (
            {"models": ["gpt2"], "x": "tokens"},
            "give it in the series as {model: gpt2, x: <number>}",
        ),
    ],
)
def test_series_bad_input(series, message):
    config = copy.deepcopy(BASE)
    config["series"]["s"] = series | {"datasets": [], "prompts": None, "signatures": None}
    models = expand_models(config, lambda training, step: "")
    with pytest.raises(
        Exception, match=message.replace("{", r"\{").replace("}", r"\}").replace("(", r"\(")
    ):
        series_members(config, models, "s")


def test_series_naming_an_unknown_model_stops_the_workflow(series_config, tmp_path):
    config = copy.deepcopy(series_config)
    config["series"]["family"]["models"].append("gpt5")
    write_config(tmp_path, config)
    with pytest.raises(
        WorkflowError, match="names 'gpt5', which is neither a model nor a training"
    ):
        dry_run(tmp_path)


def test_training_corpus_too_small_for_one_batch(series_config, tmp_path):
    config = copy.deepcopy(series_config)
    config["training"]["tiny"]["batch_size"] = 10_000
    config["series"] = {}
    write_config(tmp_path, config)
    result = snakemake(tmp_path, "results/training/tiny/curve.csv")
    assert result.returncode != 0
    log = (tmp_path / "results/logs/pack_training_corpus/tiny.log").read_text()
    assert "fewer than one batch (10000)" in log
    assert not (tmp_path / "results/training/tiny/curve.csv").exists()


def test_a_rerun_training_resumes_from_its_checkpoints(series_run, tmp_path):
    """Snakemake deletes a rerun job's outputs, not the checkpoints: each rerun segment
    resumes from the latest checkpoint it may use (the last one its own) and the same
    manifest and curve are written."""
    workdir = tmp_path / "copy"
    shutil.copytree(series_run, workdir, symlinks=True)
    training = workdir / "results/training/tiny"
    before = {name: (training / name).read_text() for name in ("checkpoints.csv", "curve.csv")}
    run_ok(workdir, "--forcerun", "train_checkpoint", "--", "results/training/tiny/training.json")
    assert json.loads((training / "training.json").read_text())["resumed_from_step"] == 8
    assert {name: (training / name).read_text() for name in before} == before


def test_members_figure_draws_the_quantities_a_summary_has(tmp_path):
    """The mean m̃ at K = 10, else the smallest K; a column without a value is left out;
    members of two probing datasets are drawn."""
    summary = pl.DataFrame(
        {
            "model": ["big", "big", "small", "small"],
            "dataset": ["a", "b", "a", "b"],
            "parameters": [900, 900, 100, 100],
            "rho": [0.8, 0.7, 0.9, 0.85],
            "pearson": [-0.99, -0.98, -0.97, -0.9],
            "rcos_we_next": [None, None, None, None],
            "miscoupling_all_k4": [0.5, 0.5, 0.6, 0.6],
            "miscoupling_all_k2": [0.4, 0.4, 0.3, 0.3],
            "miscoupling_all_k2_unnormalised": [1.0, 1.0, 2.0, 2.0],
            "bits_per_byte": [1.1, float("nan"), 1.3, float("nan")],
        },
        schema_overrides={"rcos_we_next": pl.Float64},
    )
    assert member_quantities(summary) == ["rho", "pearson", "miscoupling_all_k2", "bits_per_byte"]
    with_k10 = summary.with_columns(miscoupling_all_k10=pl.lit(0.1))
    assert "miscoupling_all_k10" in member_quantities(with_k10)
    # A series without coupling (e.g. encoders probed only) has no coupling panel.
    uncoupled = summary.select(pl.exclude("^miscoupling_.*$"))
    assert member_quantities(uncoupled) == ["rho", "pearson", "bits_per_byte"]
    options = {"width": 8.0, "format": "svg", "dpi": 100}
    plot_members(summary, path=tmp_path / "members.svg", title="t", options=options)
    assert (tmp_path / "members.svg").stat().st_size > 1000


def test_summary_reads_the_law_of_each_members_own_probe(tmp_path):
    """An encoder probed with its masked-LM task is summarised by the law of the masked
    token (offset 0, He & Su Fig. 7), the same encoder under next-token probing and a
    causal LM by the next token's (offset +1)."""
    law = pl.DataFrame(
        {
            "offset": [0, 1],
            "norm": ["model", "model"],
            "control": ["none", "none"],
            **{column: [0.5, 0.9] for column in ("rho", "pearson", "pr_first", "pr_last")},
            "overall_decay": [0.5, 0.9],
        }
    )
    law.write_csv(tmp_path / "law.csv")
    measures = ("loss", "perplexity", "accuracy", "bits_per_byte", "bits_per_character")
    pl.DataFrame({name: [1.0] for name in measures} | {"tokenizer": ["t"]}).write_csv(
        tmp_path / "evaluation.csv"
    )
    members = []
    for key, model_type, probe in [
        ("bert-mlm", "bert", "auto"),
        ("bert-ntp", "bert", "next_token"),
        ("llama", "llama", "auto"),
    ]:
        facts = {"parameters": 1, "num_layers": 1, "hidden_size": 1, "source": {}}
        (tmp_path / f"{key}.json").write_text(json.dumps(facts | {"model_type": model_type}))
        members.append(
            {
                "model": key,
                "x": key,
                "scores": {},
                "probe": probe,
                "facts": str(tmp_path / f"{key}.json"),
                "law": {"d": str(tmp_path / "law.csv")},
                "evaluation": {"d": str(tmp_path / "evaluation.csv")},
                "depth": None,
                "trajectories": None,
                "rcos": None,
            }
        )
    summary = series_summary(members, "label", "model", ())
    assert summary["probe"].to_list() == ["masked_lm", "next_token", "next_token"]
    assert summary["rho"].to_list() == [0.5, 0.9, 0.9]


def test_the_quantities_figure_draws_the_papers_quantities_only():
    """The law, evaluation, trajectory means, R_cos and m̃, m over all pairs at each K; not
    the medians, the off-diagonal means or the released code's metrics (in the table)."""
    from layerlaws.series.plots import quantities_of

    columns = [
        "model", "x", "dataset", "rho", "loss", "lss_mean", "lss_median", "rcos_we_next",
        "miscoupling_all_k10", "miscoupling_offdiagonal_k10", "miscoupling_all_k10_unnormalised",
        "miscoupling_all_k10_released_trace", "miscoupling_all_k30", "score_leaderboard",
    ]  # fmt: skip
    summary = pl.DataFrame({column: [1.0] for column in columns})
    assert quantities_of(summary) == [
        "rho", "loss", "lss_mean", "rcos_we_next", "miscoupling_all_k10",
        "miscoupling_all_k10_unnormalised", "miscoupling_all_k30", "score_leaderboard",
    ]  # fmt: skip
