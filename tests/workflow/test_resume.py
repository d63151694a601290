"""Fault injection through real Snakemake runs: a model pass and an ``extract_hidden`` job
each killed with SIGKILL right after their first progress save (``tests/fault_injection``)
resume when Snakemake runs again and end with the outputs of an uninterrupted run."""

from __future__ import annotations

import shutil

import numpy as np
import polars as pl
import pytest
from fault_injection import killed_saves, killing_environment
from snakemake_runs import run_ok, snakemake, write_config

from layerlaws.forward.kept_states import HiddenStates

pytestmark = pytest.mark.slow

PASS = "results/equilearning/tiny-llama/mini"
HIDDEN = "results/hidden/tiny-llama/mini"
EVALUATION = "results/evaluation/tiny-llama/mini.csv"
TABLES = [f"{PASS}/pr.csv", f"{PASS}/fuzziness.csv", f"{PASS}/token_views.csv", EVALUATION]


def test_killed_model_passes_resume_to_the_uninterrupted_outputs(finished, base_config, tmp_path):
    workdir = tmp_path / "killed"
    shutil.copytree(finished, workdir, symlinks=True)
    # Saves after every batch (40 texts in batches of 8: five); the batches as finished ran.
    write_config(
        workdir, {**base_config, "execution": {**base_config["execution"], "checkpoint_minutes": 0}}
    )
    again = ["--forcerun", "equilearning_pass", "extract_hidden", "--keep-going"]
    targets = [f"{PASS}/pr.csv", HIDDEN]
    environment = killing_environment(tmp_path / "fault")

    killed = snakemake(workdir, *targets, *again, env=environment)
    assert killed.returncode != 0
    assert killed_saves(tmp_path / "fault") == [
        "results/equilearning/tiny-llama/mini/.resume/pr.csv.pt",
        "results/hidden/tiny-llama/.resume/mini.pt",
    ]
    assert not (workdir / PASS / "pr.csv").exists()
    assert (workdir / PASS / ".resume/pr.csv.pt").exists()

    run_ok(workdir, *targets, env=environment)
    for rule in ["equilearning_pass", "extract_hidden"]:
        log = (workdir / f"results/logs/{rule}/tiny-llama/mini.log").read_text()
        assert "resuming the pass after batch 1" in log, log
    for table in TABLES:
        assert pl.read_csv(workdir / table).equals(pl.read_csv(finished / table)), table
    resumed, uninterrupted = (
        np.load(root / PASS / "token_views.npz") for root in [workdir, finished]
    )
    for name in uninterrupted.files:
        assert np.array_equal(resumed[name], uninterrupted[name]), name
    resumed, uninterrupted = (HiddenStates.open(root / HIDDEN) for root in [workdir, finished])
    assert resumed.rows.equals(uninterrupted.rows)
    for layer in range(uninterrupted.metadata["num_layers"] + 1):
        assert np.array_equal(resumed.layer(layer), uninterrupted.layer(layer)), layer
    assert not (workdir / PASS / ".resume").exists()
    assert not (workdir / "results/hidden/tiny-llama/.resume").exists()
