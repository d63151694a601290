"""Which SLURM partition each job of the paper config and of the default config goes to
with the shipped profile (profiles/slurm), as Snakemake resolves it: a dry run's
printout of every job's resources. A job that claims a GPU (its `gpu` resource) goes to
execution.gpu_partition, every other job to the profile's default partition; no rule is
listed anywhere, so the shards of a pass or coupling job are routed like the rest."""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

import yaml
from snakemake_runs import REPO, SNAKEMAKE

PROFILE = REPO / "profiles" / "slurm"
DEFAULT_PARTITION = "debug"
"""The shipped profile's default-resources partition."""
SHARDED = {"equilearning": {"shards": 2}, "coupling": {"shards": 2}}
MODEL_RULES = {
    "equilearning_pass",
    "equilearning_pass_shard",
    "measure_coupling",
    "measure_coupling_shard",
    "train_checkpoint",
}
"""The model-running rules of both configs (they keep no hidden states: no extract_hidden)."""
JOB = re.compile(r"^(?:local)?rule (\w+):$.*?^\s+resources: (.*?)$", re.M | re.S)


def config_file(path: Path, source: str, changes: dict) -> Path:
    """``source`` (a config of the repository) with ``changes`` merged into its blocks,
    written to ``path``."""
    config = yaml.safe_load((REPO / source).read_text())
    for block, settings in changes.items():
        config[block] = {**config.get(block, {}), **settings}
    path.write_text(yaml.safe_dump(config, sort_keys=False))
    return path


def dry_run(workdir: Path, configfile: Path) -> subprocess.Popen:
    """A dry run of the whole workflow with the shipped profile, its SLURM executor
    included (a dry run submits nothing), printing every job."""
    workdir.mkdir()
    command = [
        *SNAKEMAKE,
        "--dry-run",
        "--directory",
        str(workdir),
        "--configfile",
        str(configfile),
        "--profile",
        str(PROFILE),
    ]
    return subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)


def routed_jobs(run: subprocess.Popen) -> list[tuple[str, int, str | None]]:
    """(rule, GPUs claimed, slurm_partition) of every job the dry run ``run`` printed."""
    printed, _ = run.communicate(timeout=300)
    assert run.returncode == 0, printed[-4000:]
    jobs = []
    for rule, listed in JOB.findall(printed):
        resources = dict(item.split("=", 1) for item in listed.split(", "))
        jobs.append((rule, int(resources.get("gpu", 0)), resources.get("slurm_partition")))
    assert jobs, printed[-4000:]
    return jobs


def test_every_job_that_claims_a_gpu_goes_to_the_gpu_partition(tmp_path):
    """The paper config with its passes and couplings in two shards each, the default
    config likewise with its GPU partition renamed, and the paper config on the CPU: in
    each, a job is on the GPU partition exactly when it claims a GPU. In the paper config
    the shards and the trainings' segments claim GPUs and the merges of the shards none;
    on the CPU no job claims one and every job stays on the default partition."""
    runs = {
        "paper": ("configs/paper.yaml", SHARDED),
        "default": (
            "config.yaml",
            {**SHARDED, "execution": {"device": "auto", "gpu_partition": "a100-long"}},
        ),
        "cpu": ("configs/paper.yaml", {**SHARDED, "execution": {"device": "cpu"}}),
    }
    started = {
        name: dry_run(tmp_path / name, config_file(tmp_path / f"{name}.yaml", source, changes))
        for name, (source, changes) in runs.items()
    }
    jobs = {name: routed_jobs(run) for name, run in started.items()}

    for name, gpu_partition in (("paper", "gpu"), ("default", "a100-long")):
        misrouted = [
            (rule, gpus, partition)
            for rule, gpus, partition in jobs[name]
            if partition != (gpu_partition if gpus else DEFAULT_PARTITION)
        ]
        assert misrouted == [], name
        claiming = {rule for rule, gpus, _ in jobs[name] if gpus}
        assert {"equilearning_pass_shard", "measure_coupling_shard", "train_checkpoint"} <= claiming
        assert {rule for rule, _, _ in jobs[name]} >= MODEL_RULES, name
    # The paper's models have sizes: its merges are planned on the CPU before anything runs.
    claiming = {rule for rule, gpus, _ in jobs["paper"] if gpus}
    assert claiming == {"equilearning_pass_shard", "measure_coupling_shard", "train_checkpoint"}
    assert {partition for _, _, partition in jobs["cpu"]} == {DEFAULT_PARTITION}
    assert {gpus for _, gpus, _ in jobs["cpu"]} == {0}
    assert len(jobs["cpu"]) == len(jobs["paper"])
