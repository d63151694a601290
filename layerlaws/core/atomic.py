"""Atomic outputs: write under a temporary name in the same folder, then rename.

An interrupted job therefore never leaves a half-written file that looks finished. A table
or an archive too large to hold whole is written a part at a time (``csv_rows``,
``npz_entries``), atomically all the same.
"""

from __future__ import annotations

import contextlib
import glob
import json
import os
import shutil
import uuid
import zipfile
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any, BinaryIO

from layerlaws.core.disk import disk_error


def _temporary_sibling(path: Path) -> Path:
    return path.with_name(f".{path.name}.tmp-{uuid.uuid4().hex[:8]}")


def _remove(temporary: Path) -> None:
    """Remove what is left at ``temporary`` (a file or a folder), if anything."""
    if temporary.is_dir() and not temporary.is_symlink():
        shutil.rmtree(temporary, ignore_errors=True)
    else:
        with contextlib.suppress(OSError):  # the error that brought us here matters more
            temporary.unlink(missing_ok=True)


def remove_temporaries(path: str | os.PathLike[str]) -> None:
    """Remove the temporaries of ``path`` that writers killed mid-write left beside it (a
    failed write removes its own)."""
    final = Path(path)
    for temporary in final.parent.glob(f".{glob.escape(final.name)}.tmp-*"):
        _remove(temporary)


def _make_folder(folder: Path) -> list[Path]:
    """Create ``folder`` and its missing parents; returns those created, innermost first."""
    missing = [parent for parent in (folder, *folder.parents) if not parent.exists()]
    folder.mkdir(parents=True, exist_ok=True)
    return missing


def _remove_empty(folders: list[Path]) -> None:
    """Remove ``folders`` (innermost first) where they are still empty."""
    for folder in folders:
        try:
            folder.rmdir()
        except OSError:  # no longer empty (another job wrote there) or already gone
            return


def _disk_error_of(error: BaseException, temporary: Path, final: Path) -> OSError | None:
    """The OSError of a full or unwritable disk behind ``error`` (``core.disk``), named after
    ``final`` where it names the ``temporary`` (or a file inside it) or nothing."""
    found = disk_error(error, temporary)
    if found is None:
        return None
    name, inside = Path(os.path.abspath(found.filename)), Path(os.path.abspath(temporary))
    if name == inside or inside in name.parents:
        found.filename = str(final / name.relative_to(inside))
    return found


@contextlib.contextmanager
def atomic_path(path: str | os.PathLike[str]) -> Iterator[Path]:
    """Yield a temporary path beside ``path``; on success rename it onto ``path``.

    Works for files and folders alike: whatever the body creates at the yielded path
    replaces ``path`` (an existing folder is removed first). On an exception the
    temporary is removed, with the folders made for it that are left empty, and ``path``
    is left untouched; a full or unwritable disk is raised as the ``OSError`` that names
    ``path`` (``core.disk.disk_error``), whatever the library that wrote reported.
    """
    final = Path(path)
    created = _make_folder(final.parent)
    temporary = _temporary_sibling(final)
    try:
        yield temporary
        if final.is_dir() and not final.is_symlink():
            shutil.rmtree(final)
        os.replace(temporary, final)
    except BaseException as error:
        _remove(temporary)
        _remove_empty(created)
        found = _disk_error_of(error, temporary, final)
        if found is None:
            raise
        raise found from error


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


class CsvRows:
    """A CSV written some rows at a time (``csv_rows``), by polars: its header once, with
    the first rows' columns."""

    def __init__(self, handle: BinaryIO) -> None:
        self.handle, self.header = handle, True

    def add(self, rows: Sequence[Mapping[str, Any]]) -> None:
        """Append ``rows`` (dicts of one set of columns); none: nothing."""
        import polars as pl

        if rows:
            pl.DataFrame(list(rows)).write_csv(self.handle, include_header=self.header)
            self.header = False


class NpzEntries:
    """An uncompressed ``.npz`` written an array at a time (``npz_entries``), as
    ``numpy.savez`` writes each: a ``<key>.npy`` member of a zip archive."""

    def __init__(self, archive: zipfile.ZipFile) -> None:
        self.archive = archive

    def add(self, key: str, array: Any) -> None:
        """Append ``array`` as ``key``."""
        import numpy as np

        with self.archive.open(f"{key}.npy", "w", force_zip64=True) as member:
            np.lib.format.write_array(member, np.asanyarray(array), allow_pickle=False)


@contextlib.contextmanager
def csv_rows(path: str | os.PathLike[str]) -> Iterator[CsvRows]:
    """A CSV at ``path`` written rows at a time while the block runs, in place when it ends
    (nothing there if it raises)."""
    with atomic_path(path) as temporary, open(temporary, "wb") as handle:
        yield CsvRows(handle)


@contextlib.contextmanager
def npz_entries(path: str | os.PathLike[str]) -> Iterator[NpzEntries]:
    """An uncompressed ``.npz`` at ``path`` written an array at a time while the block runs,
    in place when it ends (nothing there if it raises)."""
    with (
        atomic_path(path) as temporary,
        zipfile.ZipFile(temporary, "w", zipfile.ZIP_STORED, allowZip64=True) as archive,
    ):
        yield NpzEntries(archive)
