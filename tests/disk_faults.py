"""A child Python process on a full disk, or in a folder it may not write, for the tests of
the one-line disk errors (``layerlaws.core.disk``).

``run_python`` runs a script in a child process limited before the script starts: this
file, run as a program, applies the limits and then executes the script, so the test
process itself is never limited. ``file_size`` sets the child's RLIMIT_FSIZE (``ulimit -f``):
a write past it fails with EFBIG, as one on a full disk fails with ENOSPC. ``unprivileged``
drops root's capabilities to override file permissions (from its bounding set, which takes
effect at the exec), so a folder made read-only (``read_only``) refuses the child's writes
even when the tests run as root.
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import resource
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

from must_run import cannot_run

REPOSITORY = Path(__file__).resolve().parents[1]
CAPABILITIES_TO_DROP = (1, 2)
"""CAP_DAC_OVERRIDE and CAP_DAC_READ_SEARCH: root's way past file permissions."""
PR_CAPBSET_DROP = 24
CANNOT_DROP = 77
"""The child's exit status when it may not drop the capabilities (no CAP_SETPCAP)."""


def run_python(
    script: str, *args: str, file_size: int | None = None, unprivileged: bool = False
) -> subprocess.CompletedProcess[str]:
    """Run ``script`` (``python -c``) with ``args`` in the repository's root, in a child
    limited to files of ``file_size`` bytes and, if ``unprivileged``, without root's
    override of file permissions; skips the test where those cannot be dropped (fails it
    under CI=true: ``must_run``)."""
    command = [sys.executable, "-c", script, *args]
    limits = [str(file_size or 0), str(int(unprivileged))]
    result = subprocess.run(
        [sys.executable, __file__, *limits, *command],
        cwd=REPOSITORY,
        capture_output=True,
        text=True,
        timeout=300,
    )
    if result.returncode == CANNOT_DROP:
        cannot_run(
            "the disk-fault test",
            "this root process may not drop its file capabilities (no CAP_SETPCAP)",
        )
    return result


@contextlib.contextmanager
def read_only(folder: Path) -> Iterator[Path]:
    """``folder`` made read-only (mode 0o555) for the block, its mode restored after."""
    mode = folder.stat().st_mode
    folder.chmod(0o555)
    try:
        yield folder
    finally:
        folder.chmod(mode)


def error_lines(stderr: str) -> list[str]:
    """The ERROR lines a job logged (``run_logged``)."""
    return [line for line in stderr.splitlines() if " ERROR " in line]


def _drop_file_capabilities() -> None:
    """Drop root's override of file permissions from the bounding set (effective from the
    next exec); exits with CANNOT_DROP where that is not allowed."""
    libc = ctypes.CDLL(None, use_errno=True)
    for capability in CAPABILITIES_TO_DROP:
        if libc.prctl(PR_CAPBSET_DROP, capability, 0, 0, 0) != 0:
            sys.exit(CANNOT_DROP)


def _exec_limited(file_size: int, unprivileged: bool, command: list[str]) -> None:
    """Apply the limits to this process and become ``command``."""
    if file_size:
        hard = resource.getrlimit(resource.RLIMIT_FSIZE)[1]
        resource.setrlimit(resource.RLIMIT_FSIZE, (file_size, hard))
    if unprivileged and os.geteuid() == 0:
        _drop_file_capabilities()
    os.execv(command[0], command)


if __name__ == "__main__":
    _exec_limited(int(sys.argv[1]), sys.argv[2] == "1", sys.argv[3:])
