"""What making some outputs of a config takes, before anything runs: every job that
Snakemake's dry run lists for them in an empty working directory (all the jobs they need:
downloads, preparation, tokenising, model jobs, fits, figures), and the GPU-hours that the
planner (``JobPlanner.plan``, the numbers ``snakemake estimate`` prints) plans for the model
jobs among them. Torch-free; Snakemake runs in a subprocess (the library never imports it).
"""

from __future__ import annotations

import re
import subprocess
import sys
import tempfile
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from layerlaws.core.errors import LayerlawsError
from layerlaws.core.settings import with_defaults
from layerlaws.core.text_files import utf8_text
from layerlaws.pipeline.layout import Layout
from layerlaws.pipeline.planning import JobPlanner

SNAKEFILE = Path(__file__).parents[2] / "Snakefile"
"""The workflow whose jobs are listed."""
JOB_LINE = re.compile(r"^(?:rule|localrule|checkpoint) (\w+):$")
"""The first line of a job in a dry run's list: the job's rule."""
WILDCARDS_LINE = re.compile(r"^\s+wildcards: (.+)$")
"""A job's wildcards in a dry run's list (``model=gpt1, dataset=bookcorpus``)."""
TOTAL_LINE = re.compile(r"^total\s+(\d+)$", re.M)
"""The jobs counted by a dry run's job stats."""


@dataclass(frozen=True)
class DryRunJob:
    """One job of a dry run's list."""

    rule: str
    wildcards: tuple[tuple[str, str], ...]
    """Its wildcards' (name, value) pairs, sorted by name (none for a job without)."""


@dataclass(frozen=True)
class TargetPlan:
    """What making some outputs takes."""

    jobs: int
    """Every job the dry run lists for them."""
    model_jobs: int
    """Those of them that the planner plans (each model pass, coupling job, training
    segment)."""
    gpu_hours: float
    """GPUs × planned runtime (hours) summed over the model jobs; a job planned on the CPU
    counts nothing, nor does any other job."""


def listed_jobs(printed: str) -> list[DryRunJob]:
    """The jobs of a dry run's list, from what Snakemake printed (stdout); a LayerlawsError
    when they are not as many as its job stats count (none when nothing is to be done)."""
    jobs: list[tuple[str, dict[str, str]]] = []
    for line in printed.splitlines():
        if match := JOB_LINE.match(line):
            jobs.append((match[1], {}))
        elif (match := WILDCARDS_LINE.match(line)) and jobs:
            pairs = re.split(r", (?=\w+=)", match[1])
            jobs[-1][1].update(pair.split("=", 1) for pair in pairs)
    total = TOTAL_LINE.search(printed)
    if len(jobs) != (int(total[1]) if total else 0):
        raise LayerlawsError(
            f"the dry run listed {len(jobs)} jobs but its job stats count "
            f"{total[1] if total else 'none'}: Snakemake prints its dry runs otherwise than "
            f"layerlaws.pipeline.target_plan reads them; update listed_jobs there"
        )
    return [DryRunJob(rule, tuple(sorted(wildcards.items()))) for rule, wildcards in jobs]


def dry_run_jobs(targets: Sequence[str], config: Path, workdir: Path) -> list[DryRunJob]:
    """The jobs of a dry run making ``targets`` (the config's rule all: none given) with
    ``config`` in ``workdir`` (an empty folder: every job they need)."""
    command = [sys.executable, "-m", "snakemake", *targets, "--snakefile", str(SNAKEFILE)]
    command += ["--directory", str(workdir), "--configfile", str(config), "-n", "--cores", "1"]
    listed = subprocess.run(command, capture_output=True, text=True)
    if listed.returncode != 0:
        raise LayerlawsError(
            f"the dry run of {' '.join(targets) or 'rule all'} with {config} failed: "
            f"{(listed.stdout + listed.stderr)[-2000:]}"
        )
    return listed_jobs(listed.stdout)


def job_key(rule: str, wildcards: Mapping[str, str]) -> tuple[str, tuple[tuple[str, str], ...]]:
    """A job's rule and sorted wildcards: a plan row's job as a dry run lists it."""
    return rule, tuple(sorted(wildcards.items()))


def target_plan(jobs: Iterable[DryRunJob], rows: Iterable[Mapping[str, Any]]) -> TargetPlan:
    """What the dry run's ``jobs`` take under the plan ``rows`` (``JobPlanner.plan``): a
    job of a rule the plan has rows of must have its own row (a LayerlawsError otherwise);
    jobs of the other rules are not model jobs (a sharded stage's merge on the CPU is
    one)."""
    planned = {job_key(row["job"], row["wildcards"]): row for row in rows}
    planned_rules = {rule for rule, _ in planned}
    jobs = list(jobs)
    model_rows = []
    for job in jobs:
        row = planned.get((job.rule, job.wildcards))
        if row is None and job.rule in planned_rules:
            raise LayerlawsError(
                f"the dry run's job {job.rule} {dict(job.wildcards)} has no row in the plan: "
                f"its stage's planned_jobs must give its rows the wildcards of its jobs"
            )
        if row is not None:
            model_rows.append(row)
    return TargetPlan(
        jobs=len(jobs),
        model_jobs=len(model_rows),
        gpu_hours=sum(row["gpu"] * row["runtime"] / 60 for row in model_rows),
    )


def read_config(config: Path) -> dict[str, Any]:
    """A config file, read and filled with the schema's defaults."""
    return with_defaults(yaml.safe_load(utf8_text(config, "config")))


def target_plans(
    target_sets: Iterable[Sequence[str]], config: Path
) -> dict[tuple[str, ...], TargetPlan]:
    """The plan of each set of targets (each once; the empty set: the config's rule all),
    each dry run and the planner in an empty working directory, as before a first run."""
    plans = {}
    with tempfile.TemporaryDirectory() as folder:
        rows = JobPlanner.from_config(read_config(config), Layout(f"{folder}/results")).plan()
        for targets in map(tuple, target_sets):
            if targets not in plans:
                with tempfile.TemporaryDirectory() as workdir:
                    jobs = dry_run_jobs(targets, config.resolve(), Path(workdir))
                plans[targets] = target_plan(jobs, rows)
    return plans
