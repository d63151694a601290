"""Logging for the workflow's scripts: to the job's log file and to stderr (the console a
local Snakemake run shows, a cluster job's output file), and the progress of long loops."""

from __future__ import annotations

import logging
import re
import resource
import sys
import time
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from layerlaws.core.disk import disk_problem
from layerlaws.core.errors import LayerlawsError

LOG_FORMAT = "%(asctime)s %(levelname)s %(name)s: %(message)s"

INTERRUPTED = (
    "interrupted; nothing half-written is kept. Rerun the same command to go on: a long job "
    "resumes from its last progress save"
)
"""The line of a job stopped by Ctrl-C."""


def problem_line(error: Exception) -> str | None:
    """The one line a job logs for a problem the user can fix: a LayerlawsError, or a full
    or unwritable disk (``core.disk.disk_problem``); None for any other failure."""
    if isinstance(error, LayerlawsError):
        return str(error)
    return disk_problem(error)


def _log_file(log_path: str) -> logging.Handler:
    """A handler writing the job's log to ``log_path`` (its folder made if missing)."""
    Path(log_path).parent.mkdir(parents=True, exist_ok=True)
    handler = logging.FileHandler(log_path, mode="w")
    handler.setFormatter(logging.Formatter(LOG_FORMAT))
    return handler


USE_LINE = re.compile(
    r"used (?P<seconds>[\d.]+) s and (?P<peak_mb>[\d,]+) MB of host memory at peak"
    r"(?: of the (?P<planned_mb>[\d,]+) MB planned)?"
)
"""The last line of every job's log (``use_line``)."""


def peak_memory_bytes() -> int:
    """The peak resident memory of this process since it started, in bytes: the kernel's
    high-water mark ``VmHWM`` of /proc/self/status (exact, not sampled, and of this
    program alone: ``getrusage``'s ``ru_maxrss`` keeps the parent's across fork and exec,
    so a job started by a 300 MB Snakemake would show 300 MB at least); ``ru_maxrss``
    where there is no /proc."""
    try:
        status = Path("/proc/self/status").read_text()
    except OSError:
        return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
    found = re.search(r"^VmHWM:\s+(\d+) kB$", status, re.M)
    return int(found.group(1)) * 1024 if found else 0


def use_line(seconds: float, planned_mb: float | None) -> str:
    """What the job used: ``seconds`` of wall time and its peak resident memory in MB
    (``peak_memory_bytes``), beside the host memory it was given (``mem_mb``)."""
    line = f"used {seconds:.1f} s and {peak_memory_bytes() / 10**6:,.0f} MB of host memory at peak"
    return line if planned_mb is None else f"{line} of the {planned_mb:,.0f} MB planned"


def run_logged(
    step: Callable[[], None], log_path: str | None, resources: Mapping[str, Any] | None = None
) -> None:
    """Run ``step`` with logging to ``log_path`` and stderr; a failure ends the process
    with status 1 and is always on stderr, and in the log where it could be opened. The
    last line says what the job used (``use_line``) against the host memory its
    ``resources`` (Snakemake's) gave it, success or failure.

    A problem the user can fix (``problem_line``: a LayerlawsError, a full or unwritable
    disk) is logged as one clear line; any other exception (a bug, or a failure of a
    library) with its traceback. An interruption (Ctrl-C, or SIGINT from Snakemake) is one
    line saying how to resume, and status 130.
    """
    logging.basicConfig(
        level=logging.INFO,
        format=LOG_FORMAT,
        handlers=[logging.StreamHandler(sys.stderr)],
        force=True,
    )
    log = logging.getLogger("layerlaws")
    started = time.monotonic()
    planned = (resources or {}).get("mem_mb")
    try:
        if log_path:
            logging.getLogger().addHandler(_log_file(log_path))
        step()
    except KeyboardInterrupt:
        log.error(INTERRUPTED)
        sys.exit(130)
    except Exception as error:
        line = problem_line(error)
        if line is None:
            log.exception("the job failed with an unexpected error")
        else:
            log.error("%s", line)
        sys.exit(1)
    finally:
        log.info("%s", use_line(time.monotonic() - started, planned))


def duration(seconds: float) -> str:
    """A time span as a person reads it: ``45 s``, ``3 min 10 s``, ``2 h 05 min``."""
    seconds = max(0, round(seconds))
    if seconds < 60:
        return f"{seconds} s"
    if seconds < 3600:
        return f"{seconds // 60} min {seconds % 60:02d} s"
    return f"{seconds // 3600} h {seconds % 3600 // 60:02d} min"


class ProgressLog:
    """The progress of a long loop of ``total`` steps as log lines: one every ``every``
    seconds at most, and the last step's, each with the steps done, the rate since the
    loop (re)started and the time left at that rate. ``done`` steps were done before (a
    resumed job); ``clock`` gives seconds (monotonic)."""

    def __init__(
        self,
        what: str,
        total: int,
        unit: str,
        *,
        done: int = 0,
        every: float = 30.0,
        clock: Callable[[], float] = time.monotonic,
        logger: logging.Logger | None = None,
    ) -> None:
        self.what, self.total, self.unit, self.every = what, total, unit, every
        self.clock, self.log = clock, logger or logging.getLogger("layerlaws")
        self.first = done
        self.started = self.last = clock()

    def update(self, done: int, extra: str = "") -> None:
        """``done`` of the ``total`` steps are done; ``extra`` is added to the line."""
        now = self.clock()
        if done < self.total and now - self.last < self.every:
            return
        self.last = now
        elapsed, steps = now - self.started, done - self.first
        rate = steps / elapsed if elapsed > 0 and steps > 0 else None
        left = "" if rate is None else f", {duration((self.total - done) / rate)} left"
        speed = "" if rate is None else f", {rate * 60:.3g} {self.unit}/min"
        share = 100 * done / self.total if self.total else 100.0
        extra = f", {extra}" if extra else ""
        self.log.info(
            "%s: %d of %d %s (%.0f%%)%s%s%s",
            self.what, done, self.total, self.unit, share, speed, extra, left,
        )  # fmt: skip
