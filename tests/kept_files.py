"""An independent reader of kept hidden states (``hidden_states.keep``), for the
references: the files as docs/outputs.md documents them, read with NumPy, polars and json
alone — ``metadata.json``, ``rows.parquet`` and ``layer_{lll}/shard_{sssss}.npy`` (rows in
order, ``shard_rows`` a file; bfloat16 stored as its raw 16 bits, the high half of the
float32 of the same value)."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import polars as pl


class KeptFiles:
    """A run's kept states: ``metadata``, ``rows``, ``num_layers`` and ``layer(l)``."""

    def __init__(self, folder: str | Path) -> None:
        self.folder = Path(folder)
        self.metadata = json.loads((self.folder / "metadata.json").read_text())
        self.rows = pl.read_parquet(self.folder / "rows.parquet")
        self.num_layers = int(self.metadata["num_layers"])

    def layer(self, layer: int) -> np.ndarray:
        """Every row of ``layer``, (rows, hidden_size) float32."""
        files = sorted((self.folder / f"layer_{layer:03d}").glob("shard_*.npy"))
        values = np.concatenate([np.load(path) for path in files])
        if self.metadata["storage_dtype"] == "bfloat16":
            values = (values.astype(np.uint32) << 16).view(np.float32)
        assert values.shape == (self.rows.height, int(self.metadata["hidden_size"]))
        return values.astype(np.float32)
