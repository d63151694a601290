"""End-to-end Snakemake runs on tiny random models: outputs, incremental reruns, bad input."""

from __future__ import annotations

import copy
import json
import shutil

import polars as pl
import pytest
from snakemake_runs import REPO, run_ok, scheduled_jobs, snakemake, write_config

pytestmark = pytest.mark.slow

AFTER_TOKENS = {
    "tokenize",
    "extract_hidden",
    "regress",
    "fit_law",
    "plot_equilearning",
    "summarize_equilearning",
    "plot_summary",
    "all",
}


@pytest.fixture(scope="module")
def base_config(llama_folder, gpt2_folder, corpus_file, tmp_path_factory):
    return {
        "models": {
            "tiny-llama": {"source": {"kind": "local", "path": str(llama_folder)}},
            "tiny-gpt2": {"source": {"kind": "local", "path": str(gpt2_folder)}},
        },
        "datasets": {
            "mini": {
                "source": {"kind": "files", "paths": [str(corpus_file)]},
                "n_samples": 40,
                "max_tokens": 24,
            },
        },
        "runs": [
            {"model": "tiny-llama", "dataset": "mini"},
            {"model": "tiny-gpt2", "dataset": "mini"},
        ],
        "signatures": {
            "pools": {"pooled": ["mini"]},
            "runs": [
                {"model": "tiny-llama", "dataset": "mini"},
                {"model": "tiny-gpt2", "dataset": "pooled"},
            ],
            "top_tokens": 60,
            "shard_texts": 30,
        },
        "coupling": {
            "prompts": {"few": {"dataset": "mini", "n_from_dataset": 1, "max_tokens": 8}},
            "runs": [
                {"model": "tiny-llama", "prompts": "few"},
                {"model": "tiny-gpt2", "prompts": "few"},
            ],
            "k": [2, 4],
            "token_layers": [1, 4],
            "lss_window": 2,
        },
        "execution": {"batch_size": 8, "lock_dir": str(tmp_path_factory.mktemp("locks"))},
    }


@pytest.fixture(scope="module")
def finished(base_config, tmp_path_factory):
    """A workdir in which the whole tiny workflow has run once."""
    workdir = tmp_path_factory.mktemp("workflow")
    write_config(workdir, base_config)
    run_ok(workdir)
    return workdir


def fresh_copy(finished, tmp_path, config):
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
        assert pr.columns == ["layer", "target", "norm", "control", "pr", "n_rows"]
        assert len(pr) == 5 * 4 * 3 * 2
        assert pr["pr"].is_between(0, 1).all()
        law = pl.read_csv(folder / "law.csv")
        assert law.columns == [
            "target",
            "norm",
            "control",
            "rho",
            "pearson",
            "pr_first",
            "pr_last",
            "overall_decay",
        ]
        assert (folder / "law.svg").stat().st_size > 1000
        assert (folder / "norms.svg").stat().st_size > 1000
        hidden = results / "hidden" / model / "mini"
        assert len(list(hidden.glob("layer_*.npy"))) == 5
    summary = pl.read_csv(results / "equilearning/summary.csv")
    assert summary.columns[:2] == ["model", "dataset"] and len(summary) == 2 * 24
    assert (results / "equilearning/summary.svg").is_file()
    log = (results / "logs/extract_hidden/tiny-llama/mini.log").read_text()
    assert "running on cpu" in log


def test_nothing_is_rerun_after_a_full_run(finished):
    assert scheduled_jobs(finished) == {}


def test_report_is_generated(finished):
    run_ok(finished, "--report", "report.html")
    html = (finished / "report.html").read_text(errors="replace")
    assert "Equi-learning" in html and "law.svg" in html


def test_plot_option_reruns_only_plots(finished, base_config, tmp_path):
    config = copy.deepcopy(base_config) | {"plots": {"dpi": 80, "heatmap_tokens": 10}}
    jobs = scheduled_jobs(fresh_copy(finished, tmp_path, config))
    assert set(jobs) == {
        "plot_equilearning",
        "plot_summary",
        "plot_signatures",
        "plot_coupling",
        "all",
    }


def test_signature_outputs(finished):
    results = finished / "results/signatures"
    for model, corpus, tied in (("tiny-llama", "mini", False), ("tiny-gpt2", "pooled", True)):
        folder = results / model / corpus
        rcos = pl.read_csv(folder / "rcos.csv")
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
    shards = pl.read_parquet(results / "tiny-llama/mini/shards/*.parquet")
    assert shards["sentence_id"].n_unique() == 80
    unigrams = pl.read_parquet(results / "tiny-llama/mini/unigrams.parquet")
    assert unigrams["count"].sum() == shards.filter(~pl.col("is_special")).height


def test_coupling_and_trajectory_outputs(finished):
    for model in ("tiny-llama", "tiny-gpt2"):
        coupling = finished / "results/coupling" / model / "few"
        depth = pl.read_csv(coupling / "depth.csv", schema_overrides={"prompt": pl.String})
        assert depth.columns == ["weights", "prompt", "layer_a", "layer_b", "k", "miscoupling"]
        assert set(depth["weights"]) == {"trained", "random"}
        assert set(depth["prompt"]) == {"0", "1", "mean"}
        assert len(depth) == 2 * 3 * 4 * 4 * 2
        assert depth["miscoupling"].is_between(0, 1).all()
        tokens = pl.read_csv(coupling / "tokens.csv", schema_overrides={"prompt": pl.String})
        assert tokens.columns == [
            "weights",
            "prompt",
            "layer",
            "kind",
            "token_a",
            "token_b",
            "k",
            "miscoupling",
        ]
        assert set(tokens["kind"]) == {"self", "fixed_output", "fixed_input"}
        assert set(tokens["layer"]) == {1, 4}
        for name in ("depth", "tokens", "adjacency"):
            assert (coupling / f"{name}.svg").stat().st_size > 1000
        trajectories = finished / "results/trajectories" / model / "few"
        shape = pl.read_csv(trajectories / "tokens.csv", schema_overrides={"prompt": pl.String})
        assert shape.columns == ["weights", "prompt", "token", "lss", "expodistance", "text"]
        assert (shape["lss"] >= 1 - 1e-9).all()
        windows = pl.read_csv(trajectories / "windows.csv")
        assert windows["start_layer"].max() == 2
        for name in ("shape", "pca"):
            assert (trajectories / f"{name}.svg").stat().st_size > 1000


def test_changing_c_does_not_recount(finished, base_config, tmp_path):
    config = copy.deepcopy(base_config)
    config["signatures"]["top_tokens"] = 30
    jobs = scheduled_jobs(fresh_copy(finished, tmp_path, config))
    assert set(jobs) == {"compare_signatures", "plot_signatures", "all"}


def test_max_tokens_reruns_tokenisation_and_after_but_not_sampling(finished, base_config, tmp_path):
    config = copy.deepcopy(base_config)
    config["datasets"]["mini"]["max_tokens"] = 20
    jobs = scheduled_jobs(fresh_copy(finished, tmp_path, config))
    assert set(jobs) == AFTER_TOKENS
    assert jobs["tokenize"] == 2


def test_new_dataset_runs_only_its_own_chain(finished, base_config, corpus_file, tmp_path):
    config = copy.deepcopy(base_config)
    config["datasets"]["other"] = {
        "source": {"kind": "files", "paths": [str(corpus_file)]},
        "n_samples": 30,
        "seed": 1,
        "max_tokens": 24,
    }
    config["runs"].append({"model": "tiny-llama", "dataset": "other"})
    jobs = scheduled_jobs(fresh_copy(finished, tmp_path, config))
    assert jobs == {
        "sample_sentences": 1,
        "tokenize": 1,
        "extract_hidden": 1,
        "regress": 1,
        "fit_law": 1,
        "plot_equilearning": 1,
        "summarize_equilearning": 1,
        "plot_summary": 1,
        "all": 1,
    }


def test_invalid_config_value_names_the_key(base_config, tmp_path):
    write_config(tmp_path, base_config | {"equilearning": {"norms": ["batch"]}})
    result = snakemake(tmp_path, "--dry-run")
    assert result.returncode != 0
    output = result.stdout + result.stderr
    assert "'batch' is not one of ['model', 'standardize', 'none']" in output
    assert "['equilearning']['norms']" in output


def test_unknown_model_key_in_runs(base_config, tmp_path):
    write_config(tmp_path, base_config | {"runs": [{"model": "gpt5", "dataset": "mini"}]})
    result = snakemake(tmp_path, "--dry-run")
    assert result.returncode != 0
    output = result.stdout + result.stderr
    assert "runs[0].model is 'gpt5', which is not a key of models" in output
    assert "tiny-gpt2" in output


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ("empty", "is empty: it holds no non-blank text"),
        ("short", "fewer than min_tokens=500 text tokens"),
        ("cuda", "execution.device is 'cuda' but no CUDA device is visible"),
    ],
)
def test_bad_input_stops_with_a_clear_message(change, message, base_config, tmp_path):
    config = copy.deepcopy(base_config)
    config["runs"] = [{"model": "tiny-llama", "dataset": "mini"}]
    # Only the probing chain: other stages would fail on the same input in their own words.
    config["signatures"]["runs"] = config["coupling"]["runs"] = []
    if change == "empty":
        (tmp_path / "empty.txt").write_text("\n \n")
        config["datasets"]["mini"]["source"]["paths"] = [str(tmp_path / "empty.txt")]
    elif change == "short":
        config["datasets"]["mini"]["min_tokens"] = 500
    else:
        config["execution"]["device"] = "cuda"
    write_config(tmp_path, config)
    result = snakemake(tmp_path)
    assert result.returncode != 0
    assert message in result.stdout + result.stderr


def test_paper_config_dry_runs(tmp_path):
    result = snakemake(tmp_path, "--dry-run", configfile=REPO / "configs" / "paper.yaml")
    assert result.returncode == 0, result.stderr[-3000:]
    assert "extract_hidden" in result.stdout
