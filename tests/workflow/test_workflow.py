"""End-to-end Snakemake runs on tiny random models: outputs, what reruns when, bad input.

The "what reruns when" tests are the table of that name in docs/workflow.md, one test per row.
"""

from __future__ import annotations

import copy
import json
import shutil
from types import SimpleNamespace

import numpy as np
import polars as pl
import pytest
import torch
import yaml
from browser import launched, report_figures
from fake_packages import install_config_packages
from kept_files import KeptFiles
from lstsq_reference import reference_pr
from snakemake.exceptions import WorkflowError
from snakemake.utils import validate
from snakemake_runs import REPO, dry_run, run_ok, scheduled_jobs, snakemake, write_config

from layerlaws.core.settings import SCHEMA_FILE
from layerlaws.coupling.workflow import COUPLING_FIGURES, TRAJECTORY_FIGURES
from layerlaws.pipeline.planning import JobPlanner

pytestmark = pytest.mark.slow

GPU_VISIBLE = torch.cuda.is_available()
"""Whether this machine has a GPU: the tiny workflow (``execution.device: auto``) runs on
it, and ``execution.device: cuda`` succeeds, exactly where this is true."""
RUNNING_ON = "running on cuda:" if GPU_VISIBLE else "running on cpu"
"""What a model pass's log says about its device under ``device: auto`` here."""

EQUILEARNING_FIGURES = {"plot_equilearning", "plot_summary"}
EVERY_FIGURE = EQUILEARNING_FIGURES | {"plot_signatures", "compare_corpora", "plot_coupling"}
ONE_PASS_ONWARDS = {
    "extract_hidden": 1,
    "equilearning_pass": 1,
    "fit_law": 1,
    "plot_equilearning": 1,
    "summarize_equilearning": 1,
    "plot_summary": 1,
    "all": 1,
}
"""The jobs from one run's model passes on (its states are kept), summaries included."""
AFTER_TOKENS = {
    "tokenize",
    "extract_hidden",
    "equilearning_pass",
    "fit_law",
    "summarize_equilearning",
    *EQUILEARNING_FIGURES,
    "all",
}


def changed_copy(finished, tmp_path, config):
    """A copy of the finished workdir with ``config`` in place of its own."""
    workdir = tmp_path / "copy"
    shutil.copytree(finished, workdir, symlinks=True)
    write_config(workdir, config)
    return workdir


def test_outputs_and_their_columns(finished):
    results = finished / "results"
    sentences = pl.read_parquet(results / "corpus/mini/sentences.parquet")
    assert sentences.columns == ["sentence_id", "text", "source"] and len(sentences) == 40
    tokens = pl.read_parquet(results / "tokens/tiny-llama/mini.parquet")
    assert tokens.columns == ["sentence_id", "position", "token_id", "is_special"]
    assert tokens.group_by("sentence_id").len()["len"].max() <= 24
    for model in ("tiny-llama", "tiny-gpt2"):
        folder = results / "equilearning" / model / "mini"
        pr = pl.read_csv(folder / "pr.csv")
        assert pr.columns == ["layer", "offset", "norm", "control", "pr", "n_rows"]
        assert len(pr) == 5 * 4 * 3 * 2
        assert pr["pr"].is_between(0, 1).all()
        law = pl.read_csv(folder / "law.csv")
        assert law.columns == [
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
        assert (folder / "law.svg").stat().st_size > 1000
        assert (folder / "norms.svg").stat().st_size > 1000
        hidden = results / "hidden" / model / "mini"
        assert len(list(hidden.glob("layer_*/shard_*.npy"))) == 5
        report = json.loads((folder / "pass.json").read_text())
        assert report["n_rows"] == pr.filter(pl.col("offset") == 0)["n_rows"][0]
        facts = json.loads((results / "models" / model / "layerlaws_model.json").read_text())
        assert facts["post_ln"] is False and facts["num_layers"] == 4
    summary = pl.read_csv(results / "equilearning/summary.csv")
    assert summary.columns[:2] == ["model", "dataset"] and len(summary) == 2 * 24
    assert (results / "equilearning/summary.svg").is_file()
    best = pl.read_csv(results / "equilearning/best_datasets.csv")
    assert best.columns == ["model", "rank", "dataset", "pearson", "rho", "chosen"]
    assert sorted(best["model"]) == ["tiny-gpt2", "tiny-llama"] and best["chosen"].all()
    fuzziness = pl.read_csv(results / "equilearning/tiny-llama/mini/fuzziness.csv")
    assert fuzziness.columns == ["layer", "norm", "fuzziness", "n_classes", "n_rows"]
    assert len(fuzziness) == 5 * 3 and (fuzziness["fuzziness"] > 0).all()
    assert (results / "equilearning/tiny-llama/mini/fuzziness.svg").stat().st_size > 1000
    views = pl.read_csv(results / "equilearning/tiny-llama/mini/token_views.csv")
    assert set(views["group"]) == {"is/are", "the"} and set(views["layer"]) == {0, 4}
    assert views.group_by("word", "layer").len()["len"].max() <= 20
    with np.load(results / "equilearning/tiny-llama/mini/token_views.npz") as states:
        assert sorted(states) == ["layer_0", "layer_4"]
        assert states["layer_4"].shape == (views.filter(pl.col("layer") == 4).height, 24)
    assert (results / "equilearning/tiny-llama/mini/token_views.svg").stat().st_size > 1000
    log = (results / "logs/equilearning_pass/tiny-llama/mini.log").read_text()
    assert RUNNING_ON in log


@pytest.mark.parametrize("model", ["tiny-llama", "tiny-gpt2"])
def test_streamed_pr_equals_lstsq_on_the_kept_states(finished, model):
    """Every layer, offset, norm and control of a run through Snakemake, against float64
    lstsq on the states the same pass kept, read without the library (GPT-2's LayerNorm
    makes the normalised features exactly rank-deficient: rcond matches the cut-off)."""
    hidden = KeptFiles(finished / "results/hidden" / model / "mini")
    pr = pl.read_csv(finished / "results/equilearning" / model / "mini/pr.csv")
    for row in pr.iter_rows(named=True):
        shuffled = row["control"] == "shuffled_vocab"
        expected, n_rows = reference_pr(
            hidden, row["layer"], row["offset"], row["norm"], shuffled, shuffle="present"
        )
        assert row["n_rows"] == n_rows
        assert row["pr"] == pytest.approx(expected, abs=1e-9), row


def test_signature_outputs(finished):
    results = finished / "results/signatures"
    for model, corpus, tied in (("tiny-llama", "mini", False), ("tiny-gpt2", "pooled", True)):
        folder = results / model / corpus
        rcos = pl.read_csv(folder / "rcos.csv")
        by_corpus = pl.read_csv(results / model / "rcos_by_corpus.csv")
        assert by_corpus.equals(rcos.select(pl.lit(corpus).alias("corpus"), pl.all()))
        for name in ("rcos_by_corpus", "per_token_by_corpus"):
            assert (results / model / f"{name}.svg").stat().st_size > 1000
        assert rcos.columns == ["matrix", "signature", "r_cos", "n_tokens"]
        assert {("W_E", "next"), ("W_U", "pre"), ("W_E", "tilde"), ("W_U", "tilde")} <= set(
            rcos.select("matrix", "signature").rows()
        )
        assert rcos["n_tokens"].max() <= 60 and rcos["r_cos"].is_between(-1, 1).all()
        per_token = pl.read_parquet(folder / "per_token.parquet")
        assert per_token.columns == [
            "matrix",
            "signature",
            "token",
            "text",
            "correlation",
            "mean_similarity",
        ]
        deciles = pl.read_csv(folder / "percentiles.csv")
        assert deciles["decile"].unique().sort().to_list() == list(range(1, 11))
        summary = json.loads((folder / "summary.json").read_text())
        assert summary["tied_embeddings"] is tied
        for name in ("heatmaps", "deciles", "per_token", "digits"):
            assert (folder / f"{name}.svg").stat().st_size > 1000
    # A pool of one corpus has exactly that corpus's counts.
    for kind in ("unigrams", "bigrams"):
        member = pl.read_parquet(results / f"tiny-gpt2/mini/{kind}.parquet")
        pooled = pl.read_parquet(results / f"tiny-gpt2/pooled/{kind}.parquet")
        assert pooled.sort(pl.all()).equals(member.sort(pl.all()))
    shards = sorted((results / "tiny-llama/mini/shards").glob("*.parquet"))
    assert len(shards) == 3  # 80 texts, execution.shard_texts = 30
    table = pl.read_parquet(shards)
    assert table["sentence_id"].n_unique() == 80
    unigrams = pl.read_parquet(results / "tiny-llama/mini/unigrams.parquet")
    assert unigrams["count"].sum() == table.filter(~pl.col("is_special")).height


def test_coupling_and_trajectory_outputs(finished):
    coupling = finished / "results/coupling/tiny-llama/few"
    depth = pl.read_csv(coupling / "depth.csv", schema_overrides={"prompt": pl.String})
    assert depth.columns == [
        "weights",
        "prompt",
        "layer_a",
        "layer_b",
        "k",
        "metric",
        "miscoupling",
    ]
    assert set(depth["weights"]) == {"trained", "random"}
    assert set(depth["prompt"]) == {"0", "1", "mean"}
    assert set(depth["metric"]) == {"paper", "unnormalised"}  # the default coupling.metrics
    assert len(depth) == 2 * 3 * 4 * 4 * 2 * 2
    assert depth.filter(pl.col("metric") == "paper")["miscoupling"].is_between(0, 1).all()
    assert (depth["miscoupling"] >= 0).all()
    tokens = pl.read_csv(coupling / "tokens.csv", schema_overrides={"prompt": pl.String})
    assert tokens.columns == [
        "weights",
        "prompt",
        "layer_a",
        "layer_b",
        "kind",
        "token_a",
        "token_b",
        "k",
        "metric",
        "miscoupling",
    ]
    assert set(tokens["kind"]) == {"self", "fixed_output", "fixed_input"}
    pairs = set(zip(tokens["layer_a"], tokens["layer_b"], strict=True))
    assert pairs == {(1, 1), (2, 4)}
    fixed_input = tokens.filter(pl.col("kind") == "fixed_input")
    assert fixed_input["token_a"].min() == 1  # coupling.fixed_input_token: J_{1,t}, t ≥ 1
    singular_values = pl.read_csv(coupling / "singular_values.csv")
    assert singular_values.columns == ["weights", "prompt", "layer", "rank", "singular_value"]
    assert len(singular_values) == 2 * 2 * 4 * 4  # weights × prompts × layers × max K
    assert (singular_values["singular_value"].diff().filter(singular_values["rank"] > 1) <= 0).all()
    for name in COUPLING_FIGURES:
        assert (coupling / f"{name}.svg").stat().st_size > 1000
    with np.load(coupling / "couplings.npz") as kept:
        assert kept["depth/trained/0"].shape == (4, 4, 2, 2)  # L × L × K × K at the smallest K
    trajectories = coupling / "trajectories"
    shape = pl.read_csv(trajectories / "tokens.csv", schema_overrides={"prompt": pl.String})
    assert shape.columns == [
        "weights",
        "prompt",
        "token",
        "lss",
        "expodistance",
        "equidistance_cv",
        "text",
    ]
    assert (shape["lss"] >= 1 - 1e-9).all()
    layers = pl.read_csv(trajectories / "layers.csv")
    assert layers.columns == [
        "weights",
        "prompt",
        "token",
        "layer",
        "norm",
        "step_length",
        "lss_window",
        "logit_entropy",
        "next_token_loss",
    ]
    assert sorted(layers["layer"].unique()) == [0, 1, 2, 3, 4]
    assert layers.filter(pl.col("layer") == 0)["lss_window"].is_nan().all()
    for name in TRAJECTORY_FIGURES:
        assert (trajectories / f"{name}.svg").stat().st_size > 1000
    # Each prompt's dataset (the default text, the paper's prompt, then mini's), its length
    # (its rows of the trajectory table) and its Jacobians (every prompt's: no subset).
    prompts = pl.read_csv(coupling / "prompts.csv", schema_overrides={"dataset": pl.String})
    assert prompts.columns == ["prompt", "dataset", "tokens", "jacobians"]
    assert prompts["dataset"].to_list() == [None, "mini"]
    lengths = shape.filter(pl.col("weights") == "trained").group_by("prompt").len().sort("prompt")
    assert prompts["tokens"].to_list() == lengths["len"].to_list()
    assert prompts["jacobians"].all()


def test_the_coupling_of_each_prompt_and_dataset_on_request(finished, tmp_path):
    """summarize_coupling, asked for by its outputs (rule all asks for them only where a
    prompt set draws from several datasets): the coupling of each prompt and dataset
    recomputed here with NumPy from depth.csv's per-prompt rows and prompts.csv, and
    nothing upstream rerun."""
    workdir = tmp_path / "copy"
    shutil.copytree(finished, workdir, symlinks=True)
    coupling = workdir / "results/coupling/tiny-llama/few"
    measured = (coupling / "depth.csv").stat().st_mtime_ns
    names = ("prompt_coupling.csv", "datasets.csv", "prompt_length.svg")
    run_ok(workdir, *(f"results/coupling/tiny-llama/few/{name}" for name in names))
    assert (coupling / "depth.csv").stat().st_mtime_ns == measured
    assert (coupling / "prompt_length.svg").stat().st_size > 1000
    depth = pl.read_csv(coupling / "depth.csv", schema_overrides={"prompt": pl.String})
    prompts = pl.read_csv(coupling / "prompts.csv", schema_overrides={"dataset": pl.String})
    per_prompt = pl.read_csv(
        coupling / "prompt_coupling.csv", schema_overrides={"dataset": pl.String}
    )
    datasets = pl.read_csv(coupling / "datasets.csv", schema_overrides={"dataset": pl.String})
    expected = {}
    for weights in ("trained", "random"):
        for prompt, dataset, length in prompts.select("prompt", "dataset", "tokens").iter_rows():
            for k in (2, 4):
                for metric in ("paper", "unnormalised"):
                    rows = depth.filter(
                        (pl.col("weights") == weights)
                        & (pl.col("prompt") == str(prompt))
                        & (pl.col("k") == k)
                        & (pl.col("metric") == metric)
                    )
                    matrix = np.full((4, 4), np.nan)
                    pairs = (rows["layer_a"].to_numpy() - 1, rows["layer_b"].to_numpy() - 1)
                    matrix[pairs] = rows["miscoupling"].to_numpy()
                    off = matrix[~np.eye(4, dtype=bool)]
                    key = (weights, prompt, dataset, length, k, metric)
                    expected[key] = (matrix.mean(), off.mean())
    got = {row[:6]: row[6:] for row in per_prompt.rows()}
    assert len(got) == per_prompt.height and set(got) == set(expected)
    np.testing.assert_allclose([got[key] for key in expected], list(expected.values()), rtol=1e-12)
    # One prompt per dataset here (the paper's, mini's): each dataset's mean is its prompt's.
    by_dataset = {
        (weights, dataset, k, metric, 1): (float(length), *values)
        for (weights, _, dataset, length, k, metric), values in expected.items()
    }
    got = {row[:5]: row[5:] for row in datasets.rows()}
    assert len(got) == datasets.height and set(got) == set(by_dataset)
    np.testing.assert_allclose(
        [got[key] for key in by_dataset], list(by_dataset.values()), rtol=1e-12
    )


REPORT_CATEGORIES = {
    "Block coupling",
    "Equi-learning",
    "Probability signatures",
    "Summary",
    "Trajectories",
}
"""The result categories of the tiny run's report (no training, series or synthetic task)."""


def test_the_report_in_a_browser_lists_its_categories_and_draws_a_figure_of_each(finished):
    run_ok(finished, "--report", "report.html")
    with launched() as browser:
        figures = report_figures(browser, finished / "report.html")
    assert set(figures) == REPORT_CATEGORIES
    drawn = {category: shown for category, shown in figures.items() if shown}
    assert drawn.keys() == figures.keys(), f"no figure drawn: {figures}"
    for path, width, height in drawn.values():
        assert (finished / path).is_file()
        assert 100 <= width <= 4000 and 100 <= height <= 4000, (path, width, height)


# What reruns when: one test per row of the table in docs/workflow.md.


def test_nothing_reruns_after_a_full_run(finished):
    assert scheduled_jobs(finished) == {}


def test_execution_settings_rerun_nothing(finished, base_config, tmp_path):
    schema = yaml.safe_load(SCHEMA_FILE.read_text())
    changed = {
        "device": "cpu",
        "batch_size": 3,
        "lock_dir": str(tmp_path / "other-locks"),
        "hidden_state_shard_rows": 97,
        "gpu_memory_gb": 16,
        "fuzziness_host_gb": 0,
        "gpus_per_node": 2,
        "vjp_chunk": 5,
        "shard_texts": 7,
        "duckdb_memory_mb": 300,
        "checkpoint_minutes": 0,
        "partition_runtime_limits": {"gpu": 1},
        "gpu_partition": "a100",
    }
    # Every execution setting, each changed alone (the others as the finished run had them).
    assert set(changed) == set(schema["properties"]["execution"]["properties"])
    workdir = changed_copy(finished, tmp_path, base_config)
    rerun = {}
    for name, value in changed.items():
        config = copy.deepcopy(base_config)
        assert config["execution"].get(name) != value, name
        config["execution"][name] = value
        write_config(workdir, config)
        rerun[name] = scheduled_jobs(workdir)
    assert {name: jobs for name, jobs in rerun.items() if jobs} == {}


def test_a_stage_plot_option_reruns_only_that_stage_figures(finished, base_config, tmp_path):
    config = copy.deepcopy(base_config) | {"plots": {"signatures": {"heatmap_tokens": 10}}}
    jobs = scheduled_jobs(changed_copy(finished, tmp_path, config))
    assert jobs == {"plot_signatures": 2, "compare_corpora": 2, "all": 1}


def test_a_figure_option_reruns_every_figure_and_nothing_else(finished, base_config, tmp_path):
    config = copy.deepcopy(base_config) | {"plots": {"dpi": 80}}
    jobs = scheduled_jobs(changed_copy(finished, tmp_path, config))
    assert set(jobs) == EVERY_FIGURE | {"all"}


def test_changing_c_does_not_recount(finished, base_config, tmp_path):
    config = copy.deepcopy(base_config)
    config["signatures"]["top_tokens"] = 30
    jobs = scheduled_jobs(changed_copy(finished, tmp_path, config))
    assert set(jobs) == {"compare_signatures", "plot_signatures", "compare_corpora", "all"}


def test_max_tokens_reruns_tokenisation_and_after_but_not_sampling(finished, base_config, tmp_path):
    config = copy.deepcopy(base_config)
    config["datasets"]["mini"]["max_tokens"] = 20
    jobs = scheduled_jobs(changed_copy(finished, tmp_path, config))
    # The prompt set draws its texts from the sample, which does not change.
    assert set(jobs) == AFTER_TOKENS
    assert jobs["tokenize"] == 2


def test_a_model_precision_reruns_only_that_model_forward_passes(finished, base_config, tmp_path):
    config = copy.deepcopy(base_config)
    config["models"]["tiny-llama"]["dtype"] = "bfloat16"
    jobs = scheduled_jobs(changed_copy(finished, tmp_path, config))
    assert jobs == ONE_PASS_ONWARDS | {"measure_coupling": 1, "plot_coupling": 1}


def test_an_equilearning_option_reruns_the_model_pass_but_not_tokenisation(
    finished, base_config, tmp_path
):
    config = copy.deepcopy(base_config)
    config["equilearning"]["cutoff"] = 1e-10  # the default is 1e-12; nothing else changes
    jobs = scheduled_jobs(changed_copy(finished, tmp_path, config))
    assert set(jobs) == AFTER_TOKENS - {"tokenize", "extract_hidden"}
    assert jobs["equilearning_pass"] == 2


def test_model_jobs_ask_for_what_their_model_and_tokens_need(finished, base_config, tmp_path):
    """The resources of a scheduled equi-learning pass are the planner's, from the
    prepared model's size and the run's tokens."""
    config = copy.deepcopy(base_config)
    config["equilearning"]["cutoff"] = 1e-10
    workdir = changed_copy(finished, tmp_path, config)
    output = run_ok(workdir, "--dry-run").stdout
    job = output.split("rule equilearning_pass:")[1].split("rule ")[0]
    results = workdir / "results"
    model = job.split("wildcards: model=")[1].split(",")[0]
    inputs = SimpleNamespace(
        model=results / "models" / model, tokens=results / "tokens" / model / "mini.parquet"
    )
    validated = yaml.safe_load((workdir / "config.yaml").read_text())
    validate(validated, str(SCHEMA_FILE))
    wildcards = SimpleNamespace(model=model, dataset="mini")
    needs = JobPlanner.from_config(validated).needs("equilearning_pass")(wildcards, inputs)
    for name in ("gpu", "mem_mb", "disk_mb", "runtime"):
        assert f"{name}={getattr(needs, name)}" in job, job


def test_estimate_plans_the_paper_config_before_anything_is_downloaded(tmp_path):
    result = snakemake(tmp_path, "estimate", configfile=REPO / "configs" / "paper.yaml")
    assert result.returncode == 0, result.stderr[-3000:]
    rows = [line for line in result.stdout.splitlines() if line.startswith("equilearning_pass")]
    # 77 runs, 20 Pythia-1B checkpoints, 19 more members of the size and data series.
    assert len(rows) == 116
    llama = next(row for row in rows if " llama2-13b " in row and " pes2o " in row)
    assert "13.02B" in llama and "<= 51,200" in llama
    assert any(" pythia-1b@step143000 " in row for row in rows)
    # A pass writes a PR table, not states: about a megabyte each.
    assert all(row.split()[-4] == "MB" and float(row.split()[-5]) < 2 for row in rows)


def test_not_keeping_hidden_states_reruns_nothing(finished, base_config, tmp_path):
    config = copy.deepcopy(base_config) | {"hidden_states": {"keep": False}}
    assert scheduled_jobs(changed_copy(finished, tmp_path, config)) == {}


def test_new_dataset_runs_only_its_own_chain(finished, base_config, corpus_file, tmp_path):
    config = copy.deepcopy(base_config)
    config["datasets"]["other"] = {
        "source": {"kind": "files", "paths": [str(corpus_file)]},
        "n_samples": 30,
        "sample_seed": 1,
        "max_tokens": 24,
    }
    config["runs"].append({"model": "tiny-llama", "dataset": "other"})
    jobs = scheduled_jobs(changed_copy(finished, tmp_path, config))
    assert jobs == ONE_PASS_ONWARDS | {"sample_sentences": 1, "tokenize": 1}


# Bad input.


def config_error(workdir, config) -> str:
    write_config(workdir, config)
    with pytest.raises(WorkflowError) as error:
        dry_run(workdir)
    return str(error.value)


def test_renamed_keys_name_their_new_place(base_config, tmp_path):
    config = copy.deepcopy(base_config)
    config["datasets"]["mini"]["seed"] = 3
    config["equilearning"] = {"targets": [1]}
    config["execution"]["dtype"] = "bfloat16"
    message = config_error(tmp_path, config)
    assert "config key datasets.mini.seed was renamed: use datasets.mini.sample_seed" in message
    assert "config key equilearning.targets was renamed: use equilearning.offsets" in message
    assert "config key execution.dtype was renamed: use models.<key>.dtype" in message


def test_paper_config_dry_runs(tmp_path):
    """The paper config plans every experiment it configures: the runs, the 13 series
    (Pythia-1B's checkpoints, one model per revision; the GPT-2, RWKV-Raven and Mamba
    sizes; the data-constrained GPT-2 models; Aubry et al.'s base and fine-tuned models, the
    base models by training tokens, and the checkpoints of four Pythia sizes), Yao & Xu's five
    trained models of each architecture (Qwen2.5, Llama 2) against their own corpora."""
    jobs = scheduled_jobs(tmp_path, configfile=REPO / "configs" / "paper.yaml")
    assert jobs["summarize_series"] == 13 and jobs["plot_series"] == 13
    # 77 runs, 20 Pythia-1B checkpoints, 19 more members of the size and data series.
    assert jobs["equilearning_pass"] == 116
    # 20 + 4 × 13 checkpoints, 24 base and 14 fine-tuned models on the leaderboard prompts,
    # 3 on WikiText-2; the leaderboard's per-prompt and per-dataset coupling of each.
    assert jobs["measure_coupling"] == 113 and jobs["summarize_coupling"] == 110
    # 13 probing datasets, 6 leaderboard datasets, WikiText-2; the five Pile subsets are
    # read whole (packed for their trainings, counted for the signatures), not sampled.
    assert jobs["sample_sentences"] == 20
    assert jobs["pack_training_corpus"] == 10
    # Every hub model (a revision is a model of its own) is downloaded before it is prepared.
    assert jobs["download_model"] == jobs["prepare_model"] - 10 == 156
    assert jobs["train_model"] == 10 and jobs["compare_own_corpora"] == 2
    # A job per segment: the checkpoints (0, 1, about the square root of the steps, the last)
    # and every segment_steps, 100,000 for Qwen (52 in all), 250,000 for Llama 2 (31).
    assert jobs["train_checkpoint"] == 83
    # Yao & Xu Fig. 12: the DM Mathematics token group in the run of qwen-dm-mathematics only.
    assert jobs["compare_token_group"] == jobs["plot_token_group"] == 1


def test_zoo_config_dry_runs(tmp_path, monkeypatch):
    """The zoo config (make zoo) plans offline with its packages installed (here fakes that
    hold only the files the planning checks look for; each model carries its size): every
    pretrained model and every trained size on the same probing texts, each causal LM's
    signatures on one corpus and its coupling on one prompt, the encoders under both
    probes, the four series; nothing runs."""
    install_config_packages(
        tmp_path / "site", yaml.safe_load((REPO / "configs/zoo.yaml").read_text())
    )
    monkeypatch.syspath_prepend(str(tmp_path / "site"))
    jobs = scheduled_jobs(tmp_path, configfile=REPO / "configs" / "zoo.yaml")
    # 3 pretrained causal LMs, 4 trained sizes, 2 encoders × 2 probes.
    assert jobs["equilearning_pass"] == 11
    assert jobs["train_model"] == 4
    # The 7 causal LMs: coupling on the prompt, signatures on the whole corpus.
    assert jobs["measure_coupling"] == 7 and jobs["compare_signatures"] == 7
    assert jobs["summarize_series"] == 4 and jobs["plot_series"] == 4
    # Three pretrained causal LMs, four encoder keys, two checkpoints of each training.
    assert jobs["prepare_model"] == 3 + 4 + 4 * 2
    assert not (tmp_path / "results").exists()


def test_the_default_config_with_shards_plans_that_many_jobs(tmp_path):
    """``coupling.shards: 3`` and ``equilearning.shards: 2`` on the default config: each
    of its 6 coupling jobs becomes 3 shard jobs and each of its 12 passes 2, each claiming
    its own device, and a merge on the CPU; nothing else changes."""
    config = yaml.safe_load((REPO / "config.yaml").read_text())
    default = scheduled_jobs(tmp_path, configfile=REPO / "config.yaml")
    config["coupling"]["shards"] = 3
    config["equilearning"]["shards"] = 2
    sharded = scheduled_jobs(tmp_path, configfile=write_config(tmp_path / "sharded", config))
    assert default["measure_coupling"] == 6 and "measure_coupling_shard" not in default
    assert default["equilearning_pass"] == 12 and "equilearning_pass_shard" not in default
    assert sharded == default | {"measure_coupling_shard": 18, "equilearning_pass_shard": 24}
