"""What a rehearsal's jobs used against what the planner asked for: the last line of every
job's log (``layerlaws.core.logs.use_line``: its wall time and exact peak resident memory,
beside the host memory ``mem_mb`` it was given), one row per job that was given one."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from layerlaws.core.logs import USE_LINE


@dataclass(frozen=True)
class JobUse:
    """One job's use of host memory against its plan."""

    job: str
    """The log's path under ``logs/`` without its suffix: rule/wildcards."""
    seconds: float
    peak_mb: float
    """Peak resident memory, MB."""
    planned_mb: float
    """The host memory the job was given (``mem_mb``), MB."""

    @property
    def ratio(self) -> float:
        """Peak over plan: above 1, the job used more than the scheduler reserved."""
        return self.peak_mb / self.planned_mb


def job_uses(logs: Path) -> list[JobUse]:
    """Every job under the log folder ``logs`` whose last use line names a planned host
    memory, worst ratio first (a job killed before its last line is left out)."""
    uses = []
    for path in sorted(logs.rglob("*.log")):
        found = list(USE_LINE.finditer(path.read_text(errors="replace")))
        if not found or found[-1]["planned_mb"] is None:
            continue
        line = found[-1]
        uses.append(
            JobUse(
                job=str(path.relative_to(logs).with_suffix("")),
                seconds=float(line["seconds"]),
                peak_mb=float(line["peak_mb"].replace(",", "")),
                planned_mb=float(line["planned_mb"].replace(",", "")),
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
