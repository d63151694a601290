"""Fake installed distributions for the tests of packaged models and corpora: files laid
out as pip lays out a wheel (the files, a ``<name>-<version>.dist-info`` with METADATA and
RECORD), found by ``importlib.metadata`` once their folder is on ``sys.path``."""

from __future__ import annotations

from pathlib import Path


def install_fake(site: Path, name: str, version: str, files: dict[str, bytes]) -> None:
    """Lay out distribution ``name`` ``version`` carrying ``files`` (path inside the
    distribution → content) in ``site``, a folder the caller puts on ``sys.path``
    (``monkeypatch.syspath_prepend``)."""
    for relative, content in files.items():
        path = site / relative
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(content)
    info = site / f"{name.replace('-', '_')}-{version}.dist-info"
    info.mkdir(parents=True)
    (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n")
    record = [*files, f"{info.name}/METADATA", f"{info.name}/RECORD"]
    (info / "RECORD").write_text("".join(f"{path},,\n" for path in record))
