"""Helpers to run the real workflow with Snakemake in a scratch folder."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import yaml

REPO = Path(__file__).resolve().parent.parent
SNAKEMAKE = [sys.executable, "-m", "snakemake", "--snakefile", str(REPO / "Snakefile")]


def write_config(workdir: Path, config: dict[str, Any]) -> Path:
    path = workdir / "config.yaml"
    workdir.mkdir(parents=True, exist_ok=True)
    path.write_text(yaml.safe_dump(config, sort_keys=False))
    return path


def snakemake(
    workdir: Path, *args: str, configfile: Path | None = None, timeout: int = 900
) -> subprocess.CompletedProcess:
    """Run Snakemake on the workflow in ``workdir`` with ``configfile`` (default: the
    workdir's config.yaml)."""
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
    return subprocess.run(command, capture_output=True, text=True, timeout=timeout)


def run_ok(workdir: Path, *args: str) -> subprocess.CompletedProcess:
    result = snakemake(workdir, *args)
    assert result.returncode == 0, result.stdout[-4000:] + result.stderr[-8000:]
    return result


def scheduled_jobs(workdir: Path) -> dict[str, int]:
    """Rule name → number of jobs a dry run would execute ({} when nothing is to be done)."""
    output = run_ok(workdir, "--dry-run").stdout
    if "Job stats:" not in output:
        assert "Nothing to be done" in output, output
        return {}
    table = output.split("Job stats:", 1)[1].split("total", 1)[0]
    return {name: int(count) for name, count in re.findall(r"^(\w+)\s+(\d+)\s*$", table, re.M)}
