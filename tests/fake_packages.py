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


def install_config_packages(site: Path, config: dict) -> list[str]:
    """Lay out in ``site`` a fake of every package the model and dataset sources of
    ``config`` name (in their pinned version, else 0), carrying empty files where the
    workflow looks (a ``file``, a ``folder``'s config.json, a packaged corpus's data);
    the names of the packages faked, in order."""
    from packaging.requirements import Requirement

    from layerlaws.text.sources import CORPUS_DATA

    packages: dict[str, dict[str, bytes]] = {}
    for model in config.get("models", {}).values():
        source = model["source"]
        for requirement in source.get("packages", []):
            packages.setdefault(requirement, {})
        if "package" in source:
            files = packages.setdefault(source["package"], {})
            for path in (source.get("file"), source.get("tokenizer_vocabulary")):
                if path:
                    files[path] = b""
            if source.get("folder"):
                files[f"{source['folder']}/config.json"] = b"{}"
    for dataset in config.get("datasets", {}).values():
        if dataset["source"]["kind"] == "packaged":
            requirement, path, what = CORPUS_DATA[dataset["source"]["corpus"]]
            packages.setdefault(requirement, {})[path if what == "file" else f"{path}/x"] = b""
    for requirement, files in packages.items():
        wanted = Requirement(requirement)
        version = next((spec.version for spec in wanted.specifier), "0")
        install_fake(site, wanted.name, version, files)
    return [Requirement(requirement).name for requirement in packages]
