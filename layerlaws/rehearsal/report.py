"""What a rehearsal's jobs used against what the planner asked for: the ``benchmark:``
files Snakemake writes with ``--benchmark-extended`` (the peak resident memory
``max_rss`` in MiB, sampled every 0.5 s for a job's first 30 s and every 30 s after, and
the resources the job was given), one row per job that was given a host memory
(``mem_mb``, in MB)."""

from __future__ import annotations

import ast
import csv
from dataclasses import dataclass
from pathlib import Path

MIB = 2**20 / 10**6
"""MB per MiB: Snakemake's max_rss is in MiB, mem_mb in MB."""


@dataclass(frozen=True)
class JobUse:
    """One job's use of host memory against its plan."""

    job: str
    """The benchmark file's path under ``benchmarks/``: rule/wildcards."""
    seconds: float
    peak_mb: float
    """Peak resident memory, MB."""
    planned_mb: float
    """The host memory the job was given (``mem_mb``), MB."""

    @property
    def ratio(self) -> float:
        """Peak over plan: above 1, the job used more than the scheduler reserved."""
        return self.peak_mb / self.planned_mb


def job_uses(benchmarks: Path) -> list[JobUse]:
    """Every job under the folder ``benchmarks`` whose extended benchmark names a
    ``mem_mb``, worst ratio first; a job whose peak was not sampled (``NA``) is left out."""
    uses = []
    for path in sorted(benchmarks.rglob("*.tsv")):
        with path.open() as table:
            rows = list(csv.DictReader(table, delimiter="\t"))
        for row in rows:
            resources = ast.literal_eval(row.get("resources") or "{}")
            if "mem_mb" not in resources or row["max_rss"] in ("NA", "-"):
                continue
            uses.append(
                JobUse(
                    job=str(path.relative_to(benchmarks).with_suffix("")),
                    seconds=float(row["s"]),
                    peak_mb=float(row["max_rss"]) * MIB,
                    planned_mb=float(resources["mem_mb"]),
                )
            )
    return sorted(uses, key=lambda use: -use.ratio)


def uses_table(uses: list[JobUse], rows: int = 10) -> str:
    """The ``rows`` jobs of highest peak/plan as a text table."""
    lines = [f"{'job':60s} {'seconds':>8s} {'peak MB':>8s} {'plan MB':>8s} {'peak/plan':>9s}"]
    for use in uses[:rows]:
        lines.append(
            f"{use.job[-60:]:60s} {use.seconds:8.1f} {use.peak_mb:8.0f} "
            f"{use.planned_mb:8.0f} {use.ratio:9.2f}"
        )
    return "\n".join(lines)
