"""A real ``kill -9`` of a job right after its first progress save, for the resume tests.

``killing_environment`` returns an environment whose Python processes (the jobs of a
Snakemake run started with it) load a ``sitecustomize`` that wraps ``os.replace``: when a
progress save (``<folder>/.resume/<name>.pt``) is renamed into place for the first time,
the rename completes and the process sends itself SIGKILL. A marker file per save path
makes each job die once only, so a second run with the same environment finishes.
"""

from __future__ import annotations

import os
from pathlib import Path

SITECUSTOMIZE = """
import hashlib, os, signal
from pathlib import Path

_replace = os.replace
MARKERS = Path({markers!r})


def replace(source, destination, *args, **kwargs):
    _replace(source, destination, *args, **kwargs)
    path = os.fspath(destination)
    if "/.resume/" in path and path.endswith(".pt"):
        marker = MARKERS / hashlib.sha256(path.encode()).hexdigest()
        if not marker.exists():
            marker.write_text(path)
            os.kill(os.getpid(), signal.SIGKILL)


os.replace = replace
"""


def killing_environment(folder: Path) -> dict[str, str]:
    """This process's environment with the killing ``sitecustomize`` (written in
    ``folder``) first on PYTHONPATH."""
    markers = folder / "killed"
    markers.mkdir(parents=True, exist_ok=True)
    (folder / "sitecustomize.py").write_text(SITECUSTOMIZE.format(markers=str(markers)))
    path = os.pathsep.join(filter(None, [str(folder), os.environ.get("PYTHONPATH")]))
    return {**os.environ, "PYTHONPATH": path}


def killed_saves(folder: Path) -> list[str]:
    """The save paths whose job was killed (one per job)."""
    return sorted(marker.read_text() for marker in (folder / "killed").iterdir())
