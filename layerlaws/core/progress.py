"""Saves of a long job's progress, so that a job killed by the scheduler, a node failure or
``kill -9`` goes on from its last save instead of from the start.

A job keeps its partial state (a picklable mapping: the statistics merged so far, the
results of the prompts done) in one file beside its first output,
``<folder>/.resume/<output name>.pt``, written atomically at most every
``execution.checkpoint_minutes`` (0: after every unit of work). Snakemake never deletes
it (it is not an output); the job removes it once its outputs are written.

Every save carries a fingerprint of what the job's numbers depend on (``fingerprint``: its
input files, its settings, the library's code) and the job's own record of the work merged
so far (e.g. the batches, in order). A rerun resumes only from a save with the same
fingerprint and says so in its log; a save from other inputs, other code or an unreadable
file is discarded with a log line saying why, and the job starts from the beginning.
The job's record is a ``prefix_hash`` of the units of work (batches, prompts) merged so
far, in order; it resumes only when ``prefix_matches``: the record is that of the first
units it would do itself.

Saves are written with ``torch.save``, not pickle: the states hold the observers' tensors
(accumulated statistics, large, possibly on a GPU), which torch.save writes as raw
storages in its zip format without pickle's in-memory copies, and loads back on the device
they were saved from. A save is loaded memory-mapped (copy on write): a host tensor is
read from the file as it is used, so a state larger than the job's host memory (the
separation fuzziness's class sums spilled to the scratch disk) can be restored; the file
stays open (and on disk, if replaced by a later save) while those tensors live. torch
is imported only where a save is read or written, so that ``layerlaws.core`` stays
torch-free (tests/pipeline/test_torch_free.py).
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import time
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

import layerlaws
from layerlaws.core.atomic import atomic_path, remove_temporaries

log = logging.getLogger(__name__)

HASHED_BYTES = 64 * 2**20
"""Files up to this size are fingerprinted by content; larger ones (model weights) by
name, size and modification time, so a 70B model's job does not read 140 GB first."""
CODE = Path(layerlaws.__file__).parent


def resume_path(output: str | os.PathLike[str]) -> Path:
    """Where the progress of the job whose first output is ``output`` is saved."""
    output = Path(output)
    return output.parent / ".resume" / f"{output.name}.pt"


def _file_records(path: Path) -> Iterable[str]:
    """One line per file under ``path`` (itself if a file), sorted: relative name and
    content hash, or size and modification time for files over HASHED_BYTES."""
    files = sorted(p for p in path.rglob("*") if p.is_file()) if path.is_dir() else [path]
    for file in files:
        stat = file.stat()
        name = file.relative_to(path).as_posix() if path.is_dir() else file.name
        if stat.st_size <= HASHED_BYTES:
            yield f"{name} sha256 {hashlib.sha256(file.read_bytes()).hexdigest()}"
        else:
            yield f"{name} size {stat.st_size} mtime_ns {stat.st_mtime_ns}"


def fingerprint(inputs: Iterable[str | os.PathLike[str]], settings: Mapping[str, Any]) -> str:
    """sha256 (hex) of the input files and folders (``_file_records``), the ``settings``
    (as sorted JSON) and the source of the ``layerlaws`` package."""
    digest = hashlib.sha256()
    for path in inputs:
        digest.update(f"input {path}\n".encode())
        for record in _file_records(Path(path)):
            digest.update(f"{record}\n".encode())
    digest.update(json.dumps(settings, sort_keys=True, default=str).encode())
    for source in sorted(CODE.rglob("*.py")):
        digest.update(source.relative_to(CODE).as_posix().encode() + source.read_bytes())
    return digest.hexdigest()


def prefix_hash(units: Iterable[Any]) -> str:
    """sha256 (hex) of the repr of ``units`` as a list, in order: a job's record of the
    units of work (batches, prompts…) it has merged so far."""
    return hashlib.sha256(repr(list(units)).encode()).hexdigest()


def job_saves(
    output: str | os.PathLike[str],
    inputs: Iterable[str | os.PathLike[str]],
    settings: Mapping[str, Any],
    every_minutes: float,
) -> ProgressSaves:
    """The progress saves of the job whose first output is ``output``, fingerprinted by
    its ``inputs`` (files and folders) and ``settings`` (its params)."""
    return ProgressSaves(resume_path(output), fingerprint(inputs, settings), every_minutes)


class ProgressSaves:
    """Loads and writes the progress saves of one job (``path``, from ``resume_path``)
    whose inputs have ``fingerprint``; ``every_minutes`` apart at most (0: at every
    ``save_if_due``)."""

    def __init__(self, path: str | os.PathLike[str], fingerprint: str, every_minutes: float):
        self.path, self.fingerprint = Path(path), fingerprint
        self.every_seconds = 60.0 * every_minutes
        self._last = time.monotonic()
        self.n_saves = 0
        self.seconds_saving = 0.0
        """Time spent writing saves, s (the overhead that resuming costs)."""

    def load(self) -> Any | None:
        """The state of the last save, or None (nothing saved, or discarded: logged)."""
        if not self.path.exists():
            return None
        import torch

        try:
            saved = torch.load(self.path, weights_only=False, mmap=True)
        except Exception as error:  # any unreadable file is discarded, never trusted
            log.warning("discarding the unreadable progress save %s: %s", self.path, error)
            return None
        if saved.get("fingerprint") != self.fingerprint:
            log.warning(
                "discarding the progress save %s: it was made from other inputs, settings or "
                "code (fingerprint %s…, this job's %s…); starting from the beginning",
                self.path,
                str(saved.get("fingerprint"))[:12],
                self.fingerprint[:12],
            )
            return None
        log.info("resuming from %s (%s, saved %s)", self.path, saved["progress"], saved["time"])
        return saved["state"]

    def prefix_matches(self, recorded: str, units: Sequence[Any], done: int, merged: str) -> bool:
        """Whether a loaded save whose record of its ``done`` units is ``recorded``
        (``prefix_hash``) merged the first ``done`` of ``units``, the work this job does in
        order; if not, logs that it is discarded (``merged`` names its units, e.g.
        ``measured prompts``)."""
        if done <= len(units) and recorded == prefix_hash(units[:done]):
            return True
        log.warning(
            "discarding the progress save %s: its %d %s are not the first of this job's %d; "
            "starting from the beginning",
            self.path,
            done,
            merged,
            len(units),
        )
        return False

    def save_if_due(self, state: Any, progress: str) -> bool:
        """Save ``state`` if ``every_minutes`` have passed since the last save (or since
        the job began); returns whether it saved."""
        if time.monotonic() - self._last < self.every_seconds:
            return False
        self.save(state, progress)
        return True

    def save(self, state: Any, progress: str) -> None:
        """Write ``state`` with the fingerprint, atomically (tensors are loaded back on the
        device they were saved from); ``progress`` says how far the job got."""
        import torch

        started = time.monotonic()
        record = {
            "fingerprint": self.fingerprint,
            "progress": progress,
            "time": time.strftime("%Y-%m-%d %H:%M:%S"),
            "state": state,
        }
        # Written through a Python file: a write that fails (a full disk) then raises torch's
        # RuntimeError while handling the OSError behind it, which atomic_path reports.
        with atomic_path(self.path) as temporary, open(temporary, "wb") as handle:
            torch.save(record, handle)
        self._last = time.monotonic()
        self.n_saves += 1
        self.seconds_saving += self._last - started
        log.info("saved progress to %s (%s)", self.path, progress)

    def cost(self) -> dict[str, Any]:
        """What saving cost so far: ``progress_saves`` and ``progress_save_seconds``."""
        return {
            "progress_saves": self.n_saves,
            "progress_save_seconds": round(self.seconds_saving, 3),
        }

    def finish(self) -> dict[str, Any]:
        """Remove the save (the job's outputs are written); returns ``cost()``."""
        self.path.unlink(missing_ok=True)
        remove_temporaries(self.path)
        if self.path.parent.is_dir() and not any(self.path.parent.iterdir()):
            self.path.parent.rmdir()
        return self.cost()
