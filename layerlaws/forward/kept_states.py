"""Kept hidden states: the folder format and its reader (no torch needed to read them).

States are written only when ``hidden_states.keep`` asks for them (the statistics of the
pipeline are computed during the forward pass). A hidden-state folder holds, for the N
text tokens of a tokens table (special tokens are never rows) and layers l = 0..L:

- ``layer_<lll>/shard_<sssss>.npy``: rows [s × shard_rows, (s + 1) × shard_rows) of the
  residual stream at layer l, (rows, hidden_size), in the storage dtype (``float32``,
  ``float16``, or ``bfloat16`` kept as its raw 16 bits, ``uint16``). Layer l < L is what
  block l + 1 receives (l = 0: the embeddings), layer L what the LM head receives;
- ``rows.parquet``: ``row``, ``sentence_id``, ``position``, ``token_id`` of each row;
- ``metadata.json``: the model's facts, the forward pass's report, ``storage_dtype``,
  ``shard_rows``.

Readers stream a layer shard by shard; no file holds more than ``shard_rows`` rows.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import polars as pl

from layerlaws.core.dtypes import NUMPY_DTYPES
from layerlaws.core.errors import LayerlawsError

METADATA = "metadata.json"
ROWS = "rows.parquet"
STORAGE_DTYPES = NUMPY_DTYPES
"""Storage dtype → the numpy dtype of its files (bfloat16 as raw bits)."""


def storage_dtype(compute_dtype: str, setting: str) -> str:
    """The dtype kept states are stored in: the forward pass's ``compute_dtype`` when
    ``hidden_states.dtype`` (``setting``) is ``compute``, else float32."""
    return compute_dtype if setting == "compute" else "float32"


def shard_path(folder: str | Path, layer: int, shard: int) -> Path:
    return Path(folder) / f"layer_{layer:03d}" / f"shard_{shard:05d}.npy"


def as_float32(values: np.ndarray, storage_dtype: str) -> np.ndarray:
    """Stored values as float32 (bfloat16 bits become the float32 of the same value)."""
    if storage_dtype == "bfloat16":
        return (values.astype(np.uint32) << 16).view(np.float32)
    return values.astype(np.float32)


@dataclass(frozen=True)
class HiddenStates:
    """Read access to a hidden-state folder (shards are memory-mapped, never loaded whole)."""

    folder: Path
    metadata: dict[str, Any]
    rows: pl.DataFrame

    @classmethod
    def open(cls, folder: str | Path) -> HiddenStates:
        path = Path(folder)
        try:
            metadata = json.loads((path / METADATA).read_text())
            rows = pl.read_parquet(path / ROWS)
        except (OSError, ValueError, pl.exceptions.PolarsError) as error:
            raise LayerlawsError(
                f"hidden-state folder {path} is missing or corrupt ({error}); delete it and "
                f"rerun the workflow to write it again"
            ) from error
        return cls(path, metadata, rows)

    @property
    def num_layers(self) -> int:
        return int(self.metadata["num_layers"])

    @property
    def hidden_size(self) -> int:
        return int(self.metadata["hidden_size"])

    def shards(self, layer: int) -> Iterator[np.ndarray]:
        """The stored shards of ``layer`` in row order, each (rows, hidden_size) float32."""
        shard_rows, n_rows = int(self.metadata["shard_rows"]), len(self.rows)
        for shard in range(-(-n_rows // shard_rows)):
            path = shard_path(self.folder, layer, shard)
            expected = (min(shard_rows, n_rows - shard * shard_rows), self.hidden_size)
            try:
                values = np.load(path, mmap_mode="r")
            except (OSError, ValueError) as error:
                raise LayerlawsError(
                    f"hidden-state file {path} is missing or corrupt ({error}); delete "
                    f"{self.folder} and rerun the workflow"
                ) from error
            if values.shape != expected:
                raise LayerlawsError(
                    f"hidden-state file {path} has shape {values.shape}, expected "
                    f"{expected}; delete {self.folder} and rerun the workflow"
                )
            yield as_float32(values, self.metadata["storage_dtype"])

    def layer(self, layer: int) -> np.ndarray:
        """All rows of ``layer``, (n_rows, hidden_size) float32, loaded into memory."""
        return np.concatenate(list(self.shards(layer)))
