"""Helpers to run the real workflow with Snakemake in a scratch folder.

Runs that execute jobs go through the ``snakemake`` command in a subprocess, as a user
runs them. Dry runs and configuration errors are checked in this process through
Snakemake's API: the same DAG and validation, without a new interpreter per check.
"""

from __future__ import annotations

import io
import logging
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import yaml

REPO = Path(__file__).resolve().parent.parent
SNAKEFILE = REPO / "Snakefile"
SNAKEMAKE = [sys.executable, "-m", "snakemake", "--snakefile", str(SNAKEFILE)]


def write_config(workdir: Path, config: dict[str, Any]) -> Path:
    path = workdir / "config.yaml"
    workdir.mkdir(parents=True, exist_ok=True)
    path.write_text(yaml.safe_dump(config, sort_keys=False))
    return path


def snakemake(
    workdir: Path,
    *args: str,
    configfile: Path | None = None,
    timeout: int = 900,
    env: dict[str, str] | None = None,
) -> subprocess.CompletedProcess:
    """Run Snakemake on the workflow in ``workdir`` with ``configfile`` (default: the
    workdir's config.yaml) and ``env`` (default: this process's environment)."""
    configfile = configfile or workdir / "config.yaml"
    command = [
        *SNAKEMAKE,
        "--directory",
        str(workdir),
        "--configfile",
        str(configfile),
        "--cores",
        "2",
        "--resources",
        "gpu=1",
        "--show-failed-logs",
        *args,
    ]
    return subprocess.run(command, capture_output=True, text=True, timeout=timeout, env=env)


def run_ok(
    workdir: Path, *args: str, env: dict[str, str] | None = None
) -> subprocess.CompletedProcess:
    result = snakemake(workdir, *args, env=env)
    assert result.returncode == 0, result.stdout[-4000:] + result.stderr[-8000:]
    return result


def dry_run(workdir: Path, configfile: Path | None = None) -> str:
    """What a dry run of the workflow in ``workdir`` prints (Snakemake's API, in this
    process); a configuration error raises as Snakemake's WorkflowError."""
    from snakemake.api import SnakemakeApi
    from snakemake.settings.types import ConfigSettings, OutputSettings, ResourceSettings

    printed = io.StringIO()
    handler = logging.StreamHandler(printed)
    snakemake_log = logging.getLogger("snakemake")
    snakemake_log.addHandler(handler)
    try:
        with SnakemakeApi(OutputSettings()) as api:
            workflow = api.workflow(
                resource_settings=ResourceSettings(cores=2, resources={"gpu": 1}),
                config_settings=ConfigSettings(configfiles=[configfile or workdir / "config.yaml"]),
                snakefile=SNAKEFILE,
                workdir=workdir,
            )
            workflow.dag().execute_workflow(executor="dryrun")
    finally:
        snakemake_log.removeHandler(handler)
    return printed.getvalue()


def scheduled_jobs(workdir: Path, configfile: Path | None = None) -> dict[str, int]:
    """Rule name → number of jobs a dry run would execute ({} when nothing is to be done)."""
    output = dry_run(workdir, configfile)
    if "Job stats:" not in output:
        assert "Nothing to be done" in output, output
        return {}
    table = output.split("Job stats:", 1)[1].split("total", 1)[0]
    return {name: int(count) for name, count in re.findall(r"^(\w+)\s+(\d+)\s*$", table, re.M)}
