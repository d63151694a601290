"""The per-rule time table of a finished Snakemake run, from the start and end times that
Snakemake records for every output (``.snakemake/metadata``).

Usage: python bench/run_times.py [WORKDIR] [--since UNIX_TIME]

One row per rule: jobs, job-minutes (the sum of its jobs' wall times), its longest job
(minutes), and when its first job started and its last ended (minutes from the run's first
start). The last line: ``run_minutes=<first start to last end> job_minutes=<sum>
jobs=<n>``. ``--since`` keeps only jobs started after that time (one run of several).
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path


def job_times(workdir: Path, since: float) -> dict[tuple[str, float], float]:
    """(rule, start) → end of every job, in seconds since the epoch. Snakemake records each
    output apart, with the job's hash: a job is counted once, from the earliest start to
    the latest end of its outputs (a job that writes them one after another records
    several)."""
    spans: dict[tuple[str, int], tuple[float, float]] = {}
    for record in (workdir / ".snakemake" / "metadata").iterdir():
        meta = json.loads(record.read_text())
        if meta.get("incomplete") or meta.get("starttime") is None:
            continue
        if meta["starttime"] >= since:
            key = (meta["rule"], meta["job_hash"])
            start, end = spans.get(key, (meta["starttime"], meta["endtime"]))
            spans[key] = (min(start, meta["starttime"]), max(end, meta["endtime"]))
    return {(rule, start): end for (rule, _), (start, end) in spans.items()}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("workdir", nargs="?", default=".", type=Path)
    parser.add_argument("--since", type=float, default=0.0)
    arguments = parser.parse_args()
    jobs = job_times(arguments.workdir, arguments.since)
    first = min(start for _, start in jobs)
    last = max(jobs.values())
    rules: dict[str, list[tuple[float, float]]] = {}
    for (rule, start), end in jobs.items():
        rules.setdefault(rule, []).append((start, end))
    print(f"{'rule':<26}{'jobs':>5}{'job-min':>9}{'longest':>9}{'first':>8}{'last':>8}")
    for rule, spans in sorted(rules.items(), key=lambda item: -sum(e - s for s, e in item[1])):
        durations = [end - start for start, end in spans]
        began = (min(start for start, _ in spans) - first) / 60
        ended = (max(end for _, end in spans) - first) / 60
        print(
            f"{rule:<26}{len(spans):>5}{sum(durations) / 60:>9.2f}{max(durations) / 60:>9.2f}"
            f"{began:>8.2f}{ended:>8.2f}"
        )
    total = sum(end - start for (_, start), end in jobs.items())
    print(f"run_minutes={(last - first) / 60:.2f} job_minutes={total / 60:.2f} jobs={len(jobs)}")


if __name__ == "__main__":
    main()
