"""The workflow through a real single-node SLURM (tests/slurm/cluster.sh) with
profiles/slurm: jobs go through sbatch, the GPU rule gets a (fake) GPU, results equal a
local run, and the machine is left as it was found (every package, by name and version).
Runs where the machine allows it (root, apt); otherwise skipped, saying why — except under
CI=true, where it must run: there a reason to skip fails the run instead."""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import numpy as np
import polars as pl
import pytest
import torch
from snakemake_runs import REPO, SNAKEMAKE

pytestmark = pytest.mark.slow

CLUSTER = REPO / "tests" / "slurm" / "cluster.sh"
CANNOT_INSTALL, FOREIGN_SLURM = 3, 4
START_SECONDS = 300
"""Limit of ``cluster.sh start`` (apt-get included); SIGKILL 10 s after SIGTERM."""
RESULT = "results/equilearning/tiny-llama/mini"


def cannot_run(reason: str) -> None:
    """Skip with ``reason``; under CI=true (where the test must run) fail with it."""
    if os.environ.get("CI") == "true":
        pytest.fail(f"the SLURM test must run under CI=true, but {reason}", pytrace=False)
    pytest.skip(reason)


def installed_packages() -> set[str]:
    """Every package dpkg knows, as "status name:arch version" (status ii, rc, iU, …)."""
    listed = subprocess.run(
        ["dpkg-query", "-W", "-f=${db:Status-Abbrev}\t${binary:Package}\t${Version}\n"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    return {" ".join(line.split()) for line in listed.splitlines() if line.strip()}


def package_changes(before: set[str], after: set[str]) -> str:
    """What differs between two records of ``installed_packages``, or '' when nothing."""
    changes = [f"+ {line}" for line in sorted(after - before)]
    changes += [f"- {line}" for line in sorted(before - after)]
    return "\n".join(changes)


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    """A running test cluster. The packages are recorded before anything can be
    installed; afterwards — on every path, a failed or timed-out start included — the
    daemons are stopped, the files and packages the cluster added are removed, and every
    package is as it was, name and version."""
    if os.geteuid() != 0:
        cannot_run("a real SLURM needs root to install and start its daemons")
    if shutil.which("slurmctld") is None and shutil.which("apt-get") is None:
        cannot_run("a real SLURM needs Debian's apt-get to install it")
    if shutil.which("dpkg-query") is None:
        cannot_run("the SLURM test needs dpkg-query to check that it leaves no package behind")
    state = tmp_path_factory.mktemp("slurm")
    packages_before = installed_packages()
    try:
        started = subprocess.run(
            ["timeout", "-k", "10", str(START_SECONDS), "bash", str(CLUSTER), "start", str(state)],
            capture_output=True,
            text=True,
        )
        if started.returncode == CANNOT_INSTALL:
            cannot_run(f"SLURM could not be installed with apt-get: {started.stderr[-500:]}")
        if started.returncode == FOREIGN_SLURM:
            cannot_run(f"this machine has a SLURM of its own: {started.stderr[-500:]}")
        assert started.returncode == 0, (
            f"cluster.sh start exited with {started.returncode} (124: timed out after "
            f"{START_SECONDS} s)\n{started.stdout[-2000:]}{started.stderr[-3000:]}"
        )
        yield state
    finally:
        subprocess.run(["bash", str(CLUSTER), "stop", str(state)], check=False)
        changes = package_changes(packages_before, installed_packages())
        assert not changes, f"the SLURM test left packages changed:\n{changes}"
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

    # Same results as the local run: bit for bit on a CPU. Where a real GPU is visible the
    # local run used it, and the SLURM job the real GPU or, given the fake GPU 1 of a
    # one-GPU machine, the CPU: equal to float32 rounding.
    expected = pl.read_csv(finished / RESULT / "pr.csv")
    on_slurm = pl.read_csv(workdir / RESULT / "pr.csv")
    if torch.cuda.is_available():
        assert on_slurm.drop("pr").equals(expected.drop("pr"))
        np.testing.assert_allclose(on_slurm["pr"], expected["pr"], rtol=0, atol=1e-5)
    else:
        assert on_slurm.equals(expected)

    # A rerun through SLURM has nothing to do.
    rerun = subprocess.run([*command, "--dry-run"], capture_output=True, text=True, timeout=120)
    assert "Nothing to be done" in rerun.stdout, rerun.stdout[-2000:]
