"""The workflow through a real single-node SLURM (tests/slurm/cluster.sh) with
profiles/slurm: jobs go through sbatch, the GPU rule gets a (fake) GPU, results equal a
local run, and the machine is left as it was found. Runs where the machine allows it
(root, apt); otherwise skipped, saying why."""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import polars as pl
import pytest
from snakemake_runs import REPO, SNAKEMAKE

pytestmark = pytest.mark.slow

CLUSTER = REPO / "tests" / "slurm" / "cluster.sh"
CANNOT_INSTALL, FOREIGN_SLURM = 3, 4
RESULT = "results/equilearning/tiny-llama/mini"


def installed_packages() -> str:
    return subprocess.run(
        ["dpkg-query", "-W", "-f=${db:Status-Abbrev} ${Package}\\n"],
        capture_output=True,
        text=True,
    ).stdout


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    """A running test cluster; afterwards every daemon, package and file the cluster
    needed is gone again."""
    if os.geteuid() != 0:
        pytest.skip("a real SLURM needs root to install and start its daemons")
    if shutil.which("slurmctld") is None and shutil.which("apt-get") is None:
        pytest.skip("a real SLURM needs Debian's apt-get to install it")
    state = tmp_path_factory.mktemp("slurm")
    packages_before = installed_packages()
    try:
        started = subprocess.run(
            ["timeout", "300", "bash", str(CLUSTER), "start", str(state)],
            capture_output=True,
            text=True,
        )
        if started.returncode == CANNOT_INSTALL:
            pytest.skip(f"SLURM could not be installed with apt-get: {started.stderr[-500:]}")
        if started.returncode == FOREIGN_SLURM:
            pytest.skip("SLURM daemons already run on this machine; not starting another")
        assert started.returncode == 0, started.stdout + started.stderr
        yield state
    finally:
        subprocess.run(["bash", str(CLUSTER), "stop", str(state)], check=False)
    assert installed_packages() == packages_before, "the SLURM test left packages behind"
    conf = Path("/etc/slurm/slurm.conf")
    assert not conf.exists() or "layerlaws-test" not in conf.read_text()


def test_workflow_on_slurm_equals_a_local_run(cluster, finished, tmp_path):
    """The finished tiny workflow, with one run's tokens and model pass deleted, is
    completed through SLURM: two jobs through sbatch (tokenisation, then the pass on a
    GPU node), a PR table equal to the local one."""
    workdir = tmp_path / "on-slurm"
    shutil.copytree(finished, workdir, symlinks=True)
    for name in (
        "results/tokens/tiny-llama/mini.parquet",
        f"{RESULT}/pr.csv",
        f"{RESULT}/pass.json",
    ):
        (workdir / name).unlink()
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
        f"{RESULT}/pr.csv",
        "--directory",
        str(workdir),
        "--configfile",
        str(workdir / "config.yaml"),
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
        "equilearning_pass:slurm_partition=gpu",
        "equilearning_pass:mem_mb=1000",
        "--slurm-init-seconds-before-status-checks",
        "1",
        "--seconds-between-status-checks",
        "2",
    ]
    result = subprocess.run(command, capture_output=True, text=True, timeout=700)
    assert result.returncode == 0, result.stdout[-4000:] + result.stderr[-6000:]

    # The two jobs went through sbatch: SLURM knows them, finished, in that folder.
    jobs = subprocess.run(
        ["scontrol", "show", "jobs", "-o"], capture_output=True, text=True
    ).stdout.splitlines()
    ours = [line for line in jobs if f"WorkDir={workdir}" in line]
    assert len(ours) == 2, jobs
    assert all("JobState=COMPLETED" in line for line in ours)
    extract = [line for line in ours if "gres/gpu=1" in line or "gpu:1" in line]
    assert extract, "the GPU rule did not ask SLURM for a GPU"
    assert any("Partition=gpu" in line for line in extract)

    # The GPU job saw the device SLURM gave it (CUDA_VISIBLE_DEVICES set by SLURM).
    log = (workdir / "results/logs/equilearning_pass/tiny-llama/mini.log").read_text()
    assert "CUDA_VISIBLE_DEVICES='0'" in log or "CUDA_VISIBLE_DEVICES='1'" in log, log

    # Same results as the local run.
    expected = pl.read_csv(finished / RESULT / "pr.csv")
    assert pl.read_csv(workdir / RESULT / "pr.csv").equals(expected)

    # A rerun through SLURM has nothing to do.
    rerun = subprocess.run([*command, "--dry-run"], capture_output=True, text=True, timeout=120)
    assert "Nothing to be done" in rerun.stdout, rerun.stdout[-2000:]
