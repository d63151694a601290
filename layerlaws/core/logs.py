"""Logging for the workflow's scripts: to the job's log file and to stderr."""

from __future__ import annotations

import logging
import sys
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
