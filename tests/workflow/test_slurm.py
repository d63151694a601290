"""The workflow through a real single-node SLURM (tests/slurm/cluster.sh) with
profiles/slurm as shipped (the cluster's partitions are named as the profile and
execution.gpu_partition name them): a slice of the paper config's rehearsal with every
kind of rule, the shards of a pass and of a coupling job included, goes through sbatch
within its planned memory, the jobs that claim a GPU get a (fake) GPU on the gpu
partition and the others stay on debug; a pass requeued mid-run resumes from its progress
save and ends with a local run's results; and the machine is left as it was found (every
package, by name and version).
Runs where the machine allows it (root, apt); otherwise skipped, saying why — except under
CI=true, where it must run: there a reason to skip fails the run instead."""

from __future__ import annotations

import os
import re
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import polars as pl
import pytest
import torch
import yaml
from must_run import cannot_run
from snakemake_runs import REPO, SNAKEMAKE, write_config

pytestmark = pytest.mark.slow

CLUSTER = REPO / "tests" / "slurm" / "cluster.sh"
CANNOT_INSTALL, FOREIGN_SLURM = 3, 4
START_SECONDS = 300
"""Limit of ``cluster.sh start`` (apt-get included); SIGKILL 10 s after SIGTERM."""
RESULT = "results/equilearning/tiny-llama/mini"
DEBUG, GPU = "debug", "gpu"
"""The test cluster's partitions: the profile's default and execution.gpu_partition's."""
THIS = "the SLURM test"
"""What must run under CI=true (``must_run.cannot_run``)."""


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
        cannot_run(THIS, "a real SLURM needs root to install and start its daemons")
    if shutil.which("slurmctld") is None and shutil.which("apt-get") is None:
        cannot_run(THIS, "a real SLURM needs Debian's apt-get to install it")
    if shutil.which("dpkg-query") is None:
        cannot_run(
            THIS,
            "the SLURM test needs dpkg-query to check that it leaves no package behind",
        )
    state = tmp_path_factory.mktemp("slurm")
    packages_before = installed_packages()
    try:
        started = subprocess.run(
            ["timeout", "-k", "10", str(START_SECONDS), "bash", str(CLUSTER), "start", str(state)],
            capture_output=True,
            text=True,
        )
        if started.returncode == CANNOT_INSTALL:
            cannot_run(
                THIS,
                f"SLURM could not be installed with apt-get: {started.stderr[-500:]}",
            )
        if started.returncode == FOREIGN_SLURM:
            cannot_run(THIS, f"this machine has a SLURM of its own: {started.stderr[-500:]}")
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


def slurm_command(workdir: Path, *targets: str) -> list[str]:
    """Snakemake making ``targets`` in ``workdir`` through the test cluster with
    profiles/slurm as shipped, polling every 2 s (not a profile setting). A hung status
    poll must not eat CI's time: SIGINT (which Snakemake honours) after 10 minutes, SIGKILL
    15 s later."""
    return [
        "timeout",
        "-s",
        "INT",
        "-k",
        "15",
        "600",
        *SNAKEMAKE,
        *targets,
        "--directory",
        str(workdir),
        "--configfile",
        str(workdir / "config.yaml"),
        "--profile",
        str(REPO / "profiles" / "slurm"),
        "--seconds-between-status-checks",
        "2",
    ]


FLOAT32 = {"rtol": 1e-4, "atol": 1e-4}
"""Tolerance of a table's float columns when the float32 forward passes behind it rounded
otherwise than the local run's: a SLURM job runs its rule's 4 threads (the profile's
CPUs), the local run 1; a pass's shards batch other texts together."""


def assert_same_table(expected: Path, actual: Path, tolerance: dict | None = None) -> None:
    """Same results as the local run: bit for bit on a CPU, or within ``tolerance``
    (``assert_allclose``'s rtol and atol) in the float columns. Where a real GPU is visible
    the local run used it, and the SLURM job the real GPU or, given the fake GPU 1 of a
    one-GPU machine, the CPU: the float columns equal to float32 rounding at least."""
    expected_table, actual_table = (
        pl.read_csv(path, infer_schema_length=None) for path in (expected, actual)
    )
    if tolerance is None and not torch.cuda.is_available():
        assert actual_table.equals(expected_table), actual
        return
    floats = [name for name, dtype in expected_table.schema.items() if dtype.is_float()]
    assert floats and actual_table.drop(floats).equals(expected_table.drop(floats)), actual
    for name in floats:
        np.testing.assert_allclose(
            actual_table[name], expected_table[name], **(tolerance or FLOAT32), err_msg=name
        )


def our_jobs(workdir: Path) -> list[str]:
    """SLURM's record of the jobs run in ``workdir`` (``scontrol show jobs -o`` lines)."""
    jobs = subprocess.run(
        ["scontrol", "show", "jobs", "-o"], capture_output=True, text=True
    ).stdout.splitlines()
    return [line for line in jobs if f"WorkDir={workdir}" in line]


REHEARSAL_SLICE = (
    "results/equilearning/gpt1/bookcorpus/law.svg",
    "results/coupling/llama3-8b/leaderboard/depth.svg",
    "results/training/qwen-arxiv/reached/step0.json",
    "results/synthetic/add/linear/weights.npz",
)
"""A slice of the paper config's rehearsal (``python -m layerlaws.rehearsal``) with every
kind of rule: the local downloads and samples, a model's preparation, a pass in two shards
and its merge, its law fitted and drawn, a coupling job in two shards, its merge and its
figure, a training's first segment and its corpus, an addition task's data and training."""
SLICE_SETTINGS = {
    "execution": {"device": "auto"},
    "equilearning": {"shards": 2},
    "coupling": {"shards": 2},
}
"""Added to the rehearsal's settings: the model-running jobs claim a GPU again (the
rehearsal runs on the CPU, ``execution.device: cpu``; ``auto`` falls back to it in the
job), and the passes and coupling jobs run in two shards."""
EXPECTED_JOBS = {
    "prepare_model": DEBUG,
    "tokenize": DEBUG,
    "equilearning_pass_shard": GPU,
    "equilearning_pass": DEBUG,
    "fit_law": DEBUG,
    "plot_equilearning": DEBUG,
    "measure_coupling_shard": GPU,
    "measure_coupling": DEBUG,
    "plot_coupling": DEBUG,
    "pack_training_corpus": DEBUG,
    "train_checkpoint": GPU,
    "synthetic_data": DEBUG,
    "train_synthetic": DEBUG,
}
"""Rule → the partition of its jobs in the slice: a job that claims a GPU on gpu, the
merges of the shards (on the CPU) and the rest on the profile's default. The local rules
(download_model, sample_sentences) run on the submitting host."""


def job_fields(line: str) -> dict[str, str]:
    """The fields of an ``scontrol show jobs -o`` line (values without spaces)."""
    return dict(item.split("=", 1) for item in line.split() if "=" in item)


def test_a_rehearsal_slice_runs_on_slurm_each_job_on_its_partition(cluster, tmp_path):
    """A slice of the paper config's rehearsal (REHEARSAL_SLICE: its hub models and
    datasets stood in, its counts divided by 1,000) runs through SLURM with profiles/slurm
    as shipped: every job but the local ones goes through sbatch and completes within its
    planned memory (the rehearsal's peak_vs_plan_max, ≤ 1: SLURM's --mem is the plan);
    the jobs that claim a GPU ask for one and land on the gpu partition with as many CPUs
    as their job's Snakemake runs threads (``--cores 2`` caps the rule's 4: a job asking
    for fewer failed in srun), the others on debug; a shard sees the device SLURM gave it."""
    folder = tmp_path / "rehearsal"
    settings = tmp_path / "slice.yaml"
    settings.write_text(yaml.safe_dump(SLICE_SETTINGS))
    options = f"--profile {REPO / 'profiles' / 'slurm'} --seconds-between-status-checks 2"
    command = [
        *("timeout", "-s", "INT", "-k", "15", "900"),
        *(sys.executable, "-m", "layerlaws.rehearsal", "--folder", str(folder)),
        *("--divide-counts-by", "1000", "--cores", "2", "--settings", str(settings)),
        *("--snakemake", options, *REHEARSAL_SLICE),
    ]
    result = subprocess.run(command, capture_output=True, text=True, cwd=REPO)
    console = (folder / "snakemake.log").read_text() if (folder / "snakemake.log").exists() else ""
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:] + console[-6000:]
    done, planned = map(int, re.search(r"rehearsal_jobs=(\d+)/(\d+)", result.stdout).groups())
    assert done == planned > len(EXPECTED_JOBS), result.stdout[-3000:]

    # Every job went through sbatch and finished, on the partition its GPU claim says.
    lines = our_jobs(folder)
    jobs = [job_fields(line) for line in lines]
    assert all(job["JobState"] == "COMPLETED" for job in jobs), lines
    rules = [re.match(r"rule_(\w+?)_wildcards_", job["Comment"])[1] for job in jobs]
    assert set(rules) == set(EXPECTED_JOBS), sorted(rules)
    assert rules.count("equilearning_pass_shard") == rules.count("measure_coupling_shard") == 2
    for rule, job, line in zip(rules, jobs, lines, strict=True):
        # --gpus=1: TresPerJob=gres:gpu:1 (AllocTRES=...,gres/gpu=1 once allocated).
        asks_gpu = re.search(r"gres[:/]gpu[:=]1\b", line) is not None
        assert job["Partition"] == EXPECTED_JOBS[rule], (rule, line)
        assert asks_gpu == (EXPECTED_JOBS[rule] == GPU), (rule, line)
        if asks_gpu:  # --cores 2 caps the rule's 4 threads, here and in the job
            assert job["NumCPUs"] == "2", (rule, line)

    # A shard saw the device SLURM gave it (CUDA_VISIBLE_DEVICES set by SLURM).
    logs = folder / "results" / "logs"
    log = (logs / "equilearning_pass_shard/gpt1/bookcorpus/0.log").read_text()
    assert "CUDA_VISIBLE_DEVICES='0'" in log or "CUDA_VISIBLE_DEVICES='1'" in log, log


PAUSING = REPO / "tests" / "slurm" / "pausing"
"""A ``sitecustomize`` that pauses every job after each of its progress saves."""
PASS_OUTPUTS = [
    "pr.csv",
    "pass.json",
    "fuzziness.csv",
    "token_views.csv",
    "token_views.npz",
]
PASS_TABLES = ["pr.csv", "fuzziness.csv", "token_views.csv"]
PASS_COMMENT = "rule_equilearning_pass_wildcards_tiny-llama_mini"
"""The comment the plugin gives the pass's job: its rule and wildcards."""
SAVE_WAIT_SECONDS = 400


def job_with_comment(comment: str) -> tuple[str, str]:
    """(id, name) of the one queued or running job whose comment is ``comment``, found as
    docs/gpus-and-clusters.md says (``squeue`` with the comment among its fields)."""
    listed = subprocess.run(
        ["squeue", "--noheader", "--format=%i|%j|%k"], capture_output=True, text=True, check=True
    ).stdout
    found = [line.split("|")[:2] for line in listed.splitlines() if line.split("|")[2] == comment]
    assert len(found) == 1, listed
    return found[0][0], found[0][1]


def wait_for(path: Path, run: subprocess.Popen, printed: Path) -> None:
    """Return once ``path`` exists; fail if ``run`` (printing to ``printed``) ends or
    SAVE_WAIT_SECONDS pass first, with what it printed."""
    deadline = time.monotonic() + SAVE_WAIT_SECONDS
    while not path.exists():
        ended = f"Snakemake ended (status {run.returncode}) before {path}"
        assert run.poll() is None, f"{ended}\n{printed.read_text()[-6000:]}"
        assert time.monotonic() < deadline, f"no {path} after {SAVE_WAIT_SECONDS} s"
        time.sleep(0.1)


def release(job: str) -> None:
    """Make a requeued ``job`` eligible now: SLURM holds a requeued job (BeginTime) about
    two minutes; ``StartTime=now`` is accepted once the job is pending again."""
    deadline = time.monotonic() + SAVE_WAIT_SECONDS
    while True:
        updated = subprocess.run(
            ["scontrol", "update", f"JobId={job}", "StartTime=now"], capture_output=True, text=True
        )
        state = subprocess.run(
            ["squeue", "--noheader", "--jobs", job, "--format=%T"], capture_output=True, text=True
        ).stdout.strip()
        if updated.returncode == 0 and state == "PENDING":
            return
        assert time.monotonic() < deadline, f"job {job} not pending: {state} {updated.stderr}"
        time.sleep(0.5)


def test_a_requeued_pass_resumes_from_its_progress_save(cluster, finished, base_config, tmp_path):
    """A model pass through SLURM that saves its progress after every batch
    (``checkpoint_minutes: 0``; tests/slurm/pausing makes each save last 2 s longer) is
    requeued with ``scontrol requeue`` once its first save exists: SLURM runs it again
    under the same job id (the profile's ``slurm-requeue``; ``release`` lifts the two
    minutes SLURM holds a requeued job), the plugin waits for it instead of
    failing it (no retry), the job resumes from the save and ends with the outputs of the
    uninterrupted local run."""
    workdir = tmp_path / "requeued"
    shutil.copytree(finished, workdir, symlinks=True)
    execution = {**base_config["execution"], "checkpoint_minutes": 0}
    write_config(workdir, {**base_config, "execution": execution})
    for name in PASS_OUTPUTS:
        (workdir / RESULT / name).unlink()
    path = os.pathsep.join(filter(None, [str(PAUSING), os.environ.get("PYTHONPATH")]))
    printed = tmp_path / "snakemake.txt"
    with printed.open("w") as output:
        run = subprocess.Popen(
            slurm_command(workdir, f"{RESULT}/pr.csv"),
            stdout=output,
            stderr=subprocess.STDOUT,
            env={**os.environ, "PYTHONPATH": path},
        )
        try:
            wait_for(workdir / RESULT / ".resume/pr.csv.pt", run, printed)
            job, name = job_with_comment(PASS_COMMENT)
            subprocess.run(["scontrol", "requeue", job], check=True)
            release(job)
            run.wait(timeout=700)
        finally:
            if run.poll() is None:
                run.send_signal(signal.SIGINT)  # Snakemake cancels its SLURM jobs
                run.wait(timeout=120)
    log = printed.read_text()
    assert run.returncode == 0, log[-8000:]
    assert name.startswith("layerlaws_"), name
    assert "Trying to restart" not in log, log[-8000:]

    # One job, run twice under its id: requeued once, then completed.
    ours = our_jobs(workdir)
    assert len(ours) == 1, ours
    assert f"JobId={job} " in ours[0] and "JobState=COMPLETED" in ours[0], ours
    assert "Requeue=1" in ours[0] and "Restarts=1" in ours[0], ours
    job_log = (workdir / "results/logs/equilearning_pass/tiny-llama/mini.log").read_text()
    assert "resuming the pass after batch" in job_log, job_log
    for table in PASS_TABLES:
        assert_same_table(finished / RESULT / table, workdir / RESULT / table, FLOAT32)
    assert not (workdir / RESULT / ".resume").exists()
