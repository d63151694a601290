"""Atomic outputs: write under a temporary name in the same folder, then rename.

An interrupted job therefore never leaves a half-written file that looks finished.
"""

from __future__ import annotations

import json
import os
import shutil
import uuid
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from pathlib import Path
from typing import Any


def _temporary_sibling(path: Path) -> Path:
    return path.with_name(f".{path.name}.tmp-{uuid.uuid4().hex[:8]}")


@contextmanager
def atomic_path(path: str | os.PathLike[str]) -> Iterator[Path]:
    """Yield a temporary path beside ``path``; on success rename it onto ``path``.

    Works for files and folders alike: whatever the body creates at the yielded path
    replaces ``path`` (an existing folder is removed first). On an exception the
    temporary is removed and ``path`` is left untouched.
    """
    final = Path(path)
    final.parent.mkdir(parents=True, exist_ok=True)
    temporary = _temporary_sibling(final)
    try:
        yield temporary
        if final.is_dir() and not final.is_symlink():
            shutil.rmtree(final)
        os.replace(temporary, final)
    finally:
        if temporary.is_dir():
            shutil.rmtree(temporary, ignore_errors=True)
        elif temporary.exists():
            temporary.unlink()


def write_json(path: str | os.PathLike[str], data: Any) -> None:
    """Write ``data`` as indented JSON, atomically."""
    with atomic_path(path) as temporary:
        temporary.write_text(json.dumps(data, indent=2, sort_keys=True) + "\n")


def write_parquet(path: str | os.PathLike[str], frame: Any) -> None:
    """Write a polars DataFrame to Parquet, atomically."""
    with atomic_path(path) as temporary:
        frame.write_parquet(temporary)


def write_csv(path: str | os.PathLike[str], frame: Any) -> None:
    """Write a polars DataFrame to CSV, atomically."""
    with atomic_path(path) as temporary:
        frame.write_csv(temporary)


def write_npz(path: str | os.PathLike[str], arrays: Mapping[str, Any]) -> None:
    """Write named arrays to an uncompressed ``.npz``, atomically (written through a
    handle, so NumPy does not append ``.npz`` to the temporary name)."""
    import numpy as np

    with atomic_path(path) as temporary, open(temporary, "wb") as handle:
        np.savez(handle, **arrays)
