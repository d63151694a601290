"""Logging for the workflow's scripts: to the job's log file and to stderr (the console a
local Snakemake run shows, a cluster job's output file), and the progress of long loops."""

from __future__ import annotations

import logging
import sys
import time
from collections.abc import Callable
from pathlib import Path

from layerlaws.core.errors import LayerlawsError


def run_logged(step: Callable[[], None], log_path: str | None) -> None:
    """Run ``step`` with logging to ``log_path`` and stderr; a failure ends the process
    with status 1 and is always in the log.

    A LayerlawsError (a problem the user can fix) is logged as one clear line; any other
    exception (a bug, or a failure of a library) with its traceback.
    """
    handlers: list[logging.Handler] = [logging.StreamHandler(sys.stderr)]
    if log_path:
        Path(log_path).parent.mkdir(parents=True, exist_ok=True)
        handlers.append(logging.FileHandler(log_path, mode="w"))
    logging.basicConfig(
        level=logging.INFO,
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
        handlers=handlers,
        force=True,
    )
    log = logging.getLogger("layerlaws")
    try:
        step()
    except LayerlawsError as error:
        log.error("%s", error)
        sys.exit(1)
    except Exception:
        log.exception("the job failed with an unexpected error")
        sys.exit(1)


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
