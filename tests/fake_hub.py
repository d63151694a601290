"""A model folder placed in the Hugging Face cache as a hub repository's snapshot, as the
hub code paths read it offline (HF_HUB_OFFLINE is set for the tests), removed after."""

from __future__ import annotations

import shutil
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path


@contextmanager
def cached_snapshot(
    folder: Path, model_id: str, revision: str, subfolder: str = ""
) -> Iterator[Path]:
    """``folder`` copied into the cache as ``model_id``'s snapshot at ``revision`` (the
    ``main`` ref), under ``subfolder`` of it; yields the snapshot's folder."""
    from huggingface_hub import constants

    repository = Path(constants.HF_HUB_CACHE) / f"models--{model_id.replace('/', '--')}"
    snapshot = repository / "snapshots" / revision
    shutil.copytree(folder, snapshot / subfolder)
    (repository / "refs").mkdir()
    (repository / "refs" / "main").write_text(revision)
    try:
        yield snapshot
    finally:
        shutil.rmtree(repository)
