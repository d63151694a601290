"""The workflow through a real single-node SLURM (tests/slurm/cluster.sh) with
profiles/slurm: jobs go through sbatch, GPU rules get a (fake) GPU, results equal a local
run. Runs where the machine allows it (root, apt); otherwise skipped, saying why."""

from __future__ import annotations

import os
import shutil
import subprocess

import polars as pl
import pytest
from snakemake_runs import REPO, SNAKEMAKE, run_ok, write_config

pytestmark = pytest.mark.slow

CLUSTER = REPO / "tests" / "slurm" / "cluster.sh"
CANNOT_INSTALL, FOREIGN_SLURM = 3, 4


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    if os.geteuid() != 0:
        pytest.skip("a real SLURM needs root to install and start its daemons")
    if shutil.which("slurmctld") is None and shutil.which("apt-get") is None:
        pytest.skip("a real SLURM needs Debian's apt-get to install it")
    state = tmp_path_factory.mktemp("slurm")
    started = subprocess.run(
        ["timeout", "300", "bash", str(CLUSTER), "start", str(state)],
        capture_output=True,
        text=True,
    )
    if started.returncode == CANNOT_INSTALL:
        pytest.skip(f"SLURM could not be installed with apt-get: {started.stderr[-500:]}")
    if started.returncode == FOREIGN_SLURM:
        pytest.skip("this machine has a SLURM configuration of its own; not replacing it")
    assert started.returncode == 0, started.stdout + started.stderr
    yield state
    subprocess.run(["bash", str(CLUSTER), "stop", str(state)], check=False)


def tiny_config(llama_folder, corpus_file, lock_dir):
    return {
        "models": {"tiny": {"source": {"kind": "local", "path": str(llama_folder)}}},
        "datasets": {
            "mini": {
                "source": {"kind": "files", "paths": [str(corpus_file)]},
                "n_samples": 30,
                "max_tokens": 24,
            }
        },
        "runs": [{"model": "tiny", "dataset": "mini"}],
        "equilearning": {"targets": [0, 1], "norms": ["model"], "controls": ["none"]},
        "execution": {"batch_size": 8, "lock_dir": str(lock_dir)},
    }


def test_workflow_on_slurm_equals_a_local_run(cluster, llama_folder, corpus_file, tmp_path):
    config = tiny_config(llama_folder, corpus_file, tmp_path / "locks")
    local, on_slurm = tmp_path / "local", tmp_path / "slurm"
    write_config(local, config)
    write_config(on_slurm, config)
    run_ok(local)
    # A hung status poll must not eat CI's time: SIGINT (which Snakemake honours) after
    # 10 minutes, SIGKILL 15 s later.
    command = [
        "timeout",
        "-s",
        "INT",
        "-k",
        "15",
        "600",
        *SNAKEMAKE,
        "--directory",
        str(on_slurm),
        "--configfile",
        str(on_slurm / "config.yaml"),
        "--profile",
        str(REPO / "profiles" / "slurm"),
        "--jobs",
        "2",
        "--max-threads",
        "1",
        "--default-resources",
        "slurm_partition=debug",
        "mem_mb=500",
        "runtime=10",
        # Replaces the profile's set-resources: the test node has ~20 GB and 2 CPUs.
        "--set-resources",
        "extract_hidden:slurm_partition=gpu",
        "extract_hidden:mem_mb=1000",
        "regress:mem_mb=1000",
        "--slurm-init-seconds-before-status-checks",
        "1",
    ]
    result = subprocess.run(command, capture_output=True, text=True, timeout=700)
    assert result.returncode == 0, result.stdout[-4000:] + result.stderr[-6000:]

    # Every job but `all` went through sbatch: SLURM knows them, finished, in that folder.
    jobs = subprocess.run(
        ["scontrol", "show", "jobs", "-o"], capture_output=True, text=True
    ).stdout.splitlines()
    ours = [line for line in jobs if f"WorkDir={on_slurm}" in line]
    assert len(ours) >= 8, jobs
    assert all("JobState=COMPLETED" in line for line in ours)
    extract = [line for line in ours if "gres/gpu=1" in line or "gpu:1" in line]
    assert extract, "the GPU rule did not ask SLURM for a GPU"
    assert any("Partition=gpu" in line for line in extract)

    # The GPU job saw the device SLURM gave it (CUDA_VISIBLE_DEVICES set by SLURM).
    log = (on_slurm / "results/logs/extract_hidden/tiny/mini.log").read_text()
    assert "CUDA_VISIBLE_DEVICES='0'" in log or "CUDA_VISIBLE_DEVICES='1'" in log, log

    # Same results as the local run.
    for name in ("pr.csv", "law.csv"):
        expected = pl.read_csv(local / "results/equilearning/tiny/mini" / name)
        actual = pl.read_csv(on_slurm / "results/equilearning/tiny/mini" / name)
        assert actual.equals(expected), name

    # A rerun through SLURM has nothing to do.
    rerun = subprocess.run([*command, "--dry-run"], capture_output=True, text=True, timeout=120)
    assert "Nothing to be done" in rerun.stdout, rerun.stdout[-2000:]
