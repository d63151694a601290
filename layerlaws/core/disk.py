"""Failures of a write that the user fixes on their disk: it is full (or over a quota or the
file-size limit), or the folder may not be written (permissions, a read-only file system).

Libraries report them in several ways: an ``OSError`` (Python's own files), one that names
no file (a failed ``write``), one whose message alone carries the number (polars:
``Permission denied (os error 13)``), or an error of their own raised while handling it
(torch.save through a Python file: ``unexpected pos``). ``disk_error`` finds the ``OSError``
in any of them; ``disk_problem`` is the one line a job logs for it (``run_logged``).
"""

from __future__ import annotations

import errno
import os
import re
from pathlib import Path

from layerlaws.core.errors import LayerlawsError

NO_SPACE = frozenset({errno.ENOSPC, errno.EDQUOT, errno.EFBIG})
"""The disk is full, a quota is reached, or a file would pass the file-size limit."""
NO_WRITE = frozenset({errno.EACCES, errno.EROFS})
"""The folder may not be written: permissions, or a read-only file system."""
DISK_ERRNOS = NO_SPACE | NO_WRITE

_OS_ERROR_NUMBER = re.compile(r"\(os error (\d+)\)")
"""How Rust libraries (polars) write the number of the OSError behind their own."""


def _errno_of(error: BaseException) -> int | None:
    """The errno of ``error``: its own, or the one its message names (``(os error N)``)."""
    if isinstance(error, OSError) and error.errno is not None:
        return error.errno
    match = _OS_ERROR_NUMBER.search(str(error))
    return int(match.group(1)) if match else None


def _chain(error: BaseException) -> list[BaseException]:
    """``error`` and those it was raised from or while handling, outermost first."""
    chain: list[BaseException] = []
    while error is not None and error not in chain:
        chain.append(error)
        error = error.__cause__ or error.__context__
    return chain


def disk_error(error: BaseException, path: str | os.PathLike[str] | None = None) -> OSError | None:
    """The ``OSError`` of a full or unwritable disk behind ``error`` (itself, or in its
    chain), or None for any other failure and for a LayerlawsError (which says what to do
    itself); named after the file it names, else ``path``."""
    if isinstance(error, LayerlawsError):
        return None
    for cause in _chain(error):
        number = _errno_of(cause)
        if number in DISK_ERRNOS:
            named = getattr(cause, "filename", None) or path
            return OSError(number, os.strerror(number), None if named is None else str(named))
    return None


def disk_problem(error: BaseException) -> str | None:
    """The one line a job logs for a full or unwritable disk behind ``error`` (the path, the
    cause and what to do), or None for any other failure."""
    found = disk_error(error)
    if found is None:
        return None
    where = found.filename or "a file (the system did not say which)"
    folder = Path(found.filename).parent if found.filename else "its folder"
    elsewhere = "move the results to a folder you may write and link them back (`ln -s`)"
    if found.errno in NO_SPACE:
        what = (
            "Free space on its disk (or raise your quota or the file-size limit, `ulimit -f`), "
            "or move the results to a disk with room and link them back (`ln -s`)"
        )
    elif found.errno == errno.EROFS:
        what = f"Mount {folder} read-write, or {elsewhere}"
    else:
        what = f"Give this user access (for an output: make {folder} writable), or {elsewhere}"
    verb = "open" if found.errno == errno.EACCES else "write"
    return f"could not {verb} {where}: {found.strerror}. {what}; then rerun"
