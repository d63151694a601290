"""An observer of the forward pass that keeps every layer's states in a hidden-state
folder (format and reader: ``layerlaws.forward.kept_states``), for users' own analyses."""

from __future__ import annotations

import json
from dataclasses import asdict
from pathlib import Path
from typing import Any

import numpy as np
import polars as pl
import torch

from layerlaws.core.dtypes import torch_dtype
from layerlaws.core.progress import ProgressSaves
from layerlaws.forward.kept_states import METADATA, ROWS, STORAGE_DTYPES, shard_path
from layerlaws.forward.model_pass import Batch, run_forward_pass, text_rows
from layerlaws.models.architectures import BLOCK_INPUTS, LayerChoice
from layerlaws.models.facts import ModelFacts


class HiddenStateWriter:
    """Writes the observed states of layers 0..L into shards of ``shard_rows`` rows.

    ``rows`` are the observed rows of the whole pass in row order (``text_rows``); every
    shard file is created up front and filled in place (memory-mapped, opened only while
    written, flushed to disk after each write) as batches arrive in any order, so writing
    a batch twice (after an out-of-memory retry) changes nothing. Shards already in
    ``folder`` with the right shape are kept (a resumed pass, ``run_forward_pass``, writes
    the rows its save does not hold; one that starts again overwrites every row).
    """

    progress_attributes = ()
    """Nothing to restore: what is written is in the shards."""

    def __init__(
        self,
        folder: str | Path,
        facts: ModelFacts,
        rows: pl.DataFrame,
        storage_dtype: str,
        shard_rows: int,
    ) -> None:
        if storage_dtype not in STORAGE_DTYPES:
            raise ValueError(f"storage dtype {storage_dtype!r}; allowed: {list(STORAGE_DTYPES)}")
        self.folder, self.facts = Path(folder), facts
        self.storage_dtype, self.shard_rows = storage_dtype, shard_rows
        self.n_rows = len(rows)
        self.folder.mkdir(parents=True, exist_ok=True)
        rows.with_row_index("row").with_columns(pl.col("row").cast(pl.Int64)).write_parquet(
            self.folder / ROWS
        )
        for layer in range(facts.num_layers + 1):
            shard_path(self.folder, layer, 0).parent.mkdir(exist_ok=True)
            for shard, start in enumerate(range(0, self.n_rows, shard_rows)):
                shape = (min(shard_rows, self.n_rows - start), facts.hidden_size)
                path, dtype = shard_path(self.folder, layer, shard), STORAGE_DTYPES[storage_dtype]
                if not _holds(path, shape, dtype):
                    np.lib.format.open_memmap(path, mode="w+", dtype=dtype, shape=shape).flush()
        self._row_numbers = np.empty(0, dtype=np.int64)

    def begin_batch(self, batch: Batch) -> None:
        self._row_numbers = batch.row_numbers

    def observe(self, layer: int, states: torch.Tensor) -> None:
        if self.storage_dtype == "bfloat16":
            values = states.to(torch.bfloat16).view(torch.uint16).cpu().numpy()
        else:
            values = states.to(torch_dtype(self.storage_dtype)).cpu().numpy()
        shard_of, within = np.divmod(self._row_numbers, self.shard_rows)
        for shard in np.unique(shard_of):
            mine = shard_of == shard
            stored = np.load(shard_path(self.folder, layer, int(shard)), mmap_mode="r+")
            stored[within[mine]] = values[mine]
            stored.flush()

    def finish(self, report: dict[str, Any]) -> dict[str, Any]:
        """Write ``metadata.json``: the model's facts, the forward pass's ``report``, the
        storage dtype and shard size; returns it."""
        metadata = {
            **asdict(self.facts),
            **report,
            "storage_dtype": self.storage_dtype,
            "shard_rows": self.shard_rows,
        }
        (self.folder / METADATA).write_text(json.dumps(metadata, indent=2) + "\n")
        return metadata


def _holds(path: Path, shape: tuple[int, int], dtype: np.dtype) -> bool:
    """Whether ``path`` is a shard of ``shape`` and ``dtype`` (one to keep)."""
    try:
        stored = np.load(path, mmap_mode="r")
    except (OSError, ValueError):
        return False
    return stored.shape == shape and stored.dtype == np.dtype(dtype)


def extract_hidden_states(
    model: Any,
    facts: ModelFacts,
    tokens: pl.DataFrame,
    *,
    out_folder: str | Path,
    batch_size: int | str,
    device: str,
    storage_dtype: str = "float32",
    shard_rows: int = 65536,
    progress: bool = True,
    saves: ProgressSaves | None = None,
    layers: LayerChoice = BLOCK_INPUTS,
) -> dict[str, Any]:
    """Run ``model`` over ``tokens`` and keep the states of the text tokens at every layer
    ``layers`` chooses in ``out_folder`` (nothing else observed; the metadata's
    ``num_layers`` is their L); returns the metadata written. With ``saves`` the pass
    resumes from its last save, keeping the shards written in ``out_folder``."""
    facts = facts.counting(layers)
    writer = HiddenStateWriter(out_folder, facts, text_rows(tokens), storage_dtype, shard_rows)
    report = run_forward_pass(
        model, facts, tokens, [writer], batch_size, device, progress, saves=saves, layers=layers
    )
    return writer.finish(report)
