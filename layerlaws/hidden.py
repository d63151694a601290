"""Hidden-state extraction and its on-disk cache.

A hidden-state folder holds, for the N text tokens of a tokens table (special tokens are
never rows) and layers l = 0..L:

- ``layer_<lll>.npy``: float32 array (N, hidden_size), the residual stream at layer l:
  what block l + 1 receives for l < L (l = 0: the embeddings), what the LM head receives
  for l = L (after the final norm), taken with hooks (``layerlaws.blocks.layer_states``);
- ``rows.parquet``: ``row``, ``sentence_id``, ``position``, ``token_id`` of each row;
- ``metadata.json``: layer count, hidden size, norm type and eps, compute and storage
  dtypes, row count, model source, device and throughput.
"""

from __future__ import annotations

import json
import logging
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import numpy as np
import polars as pl
import torch
from tqdm import tqdm

from layerlaws.blocks import layer_states
from layerlaws.errors import LayerlawsError
from layerlaws.models import ModelFacts

log = logging.getLogger(__name__)

METADATA = "metadata.json"
ROWS = "rows.parquet"


def layer_file(layer: int) -> str:
    return f"layer_{layer:03d}.npy"


@dataclass(frozen=True)
class TokenSequence:
    """One tokenised sentence: its ids (T,) int64 and which positions are special (T,) bool."""

    sentence_id: int
    token_ids: np.ndarray
    is_special: np.ndarray


def sequences_of(tokens: pl.DataFrame) -> list[TokenSequence]:
    """Split a tokens table into sequences, in order of first appearance."""
    ordered = tokens.sort(["sentence_id", "position"], maintain_order=True)
    return [
        TokenSequence(int(key[0]), part["token_id"].to_numpy(), part["is_special"].to_numpy())
        for key, part in ordered.group_by("sentence_id", maintain_order=True)
    ]


def length_sorted_batches(lengths: list[int], batch_size: int) -> list[list[int]]:
    """Indices of sequences grouped into batches of similar length (longest first)."""
    order = sorted(range(len(lengths)), key=lambda i: (-lengths[i], i))
    return [order[start : start + batch_size] for start in range(0, len(order), batch_size)]


CPU_BATCH_SIZE = 16
"""Batch size of ``batch_size: auto`` on a CPU."""


def automatic_batch_size(facts: ModelFacts, longest: int, device: str, dtype_bytes: int) -> int:
    """Sequences per batch that should fit in half the device's free memory.

    Counts L + 1 hidden states per token (as if every layer's state were held at once;
    they are copied to the host layer by layer) and working space of roughly 24
    hidden-size vectors more (MLP, attention, norms). The estimate is rough on purpose: an
    out-of-memory batch is split and retried.
    """
    if not device.startswith("cuda"):
        return CPU_BATCH_SIZE
    free_bytes, _ = torch.cuda.mem_get_info(torch.device(device))
    per_sequence = longest * (facts.num_layers + 1 + 24) * facts.hidden_size * dtype_bytes
    return int(max(1, min(512, free_bytes // 2 // per_sequence)))


def run_splitting_on_oom(
    process: Callable[[list[int]], None], batch: list[int], device: str
) -> int:
    """Process ``batch``; when the device runs out of memory, process its two halves
    instead (recursively). Returns how many times a batch was split; a single sequence
    that does not fit is a LayerlawsError."""
    try:
        process(batch)
        return 0
    except torch.OutOfMemoryError:
        if len(batch) == 1:
            raise LayerlawsError(
                f"one sequence does not fit in the memory of {device}; lower the dataset's "
                f"max_tokens, use execution.dtype bfloat16, or a larger GPU"
            ) from None
    # Outside the handler, the exception and the frames holding the batch's tensors are
    # gone, so their memory can be released before the retry.
    if device.startswith("cuda"):
        torch.cuda.empty_cache()
    half = len(batch) // 2
    log.warning(
        "out of memory with %d sequences on %s; retrying as %d + %d",
        len(batch),
        device,
        half,
        len(batch) - half,
    )
    return (
        1
        + run_splitting_on_oom(process, batch[:half], device)
        + run_splitting_on_oom(process, batch[half:], device)
    )


@torch.inference_mode()
def extract_hidden_states(
    model: Any,
    facts: ModelFacts,
    tokens: pl.DataFrame,
    out_folder: str | Path,
    batch_size: int | str,
    device: str,
    progress: bool = True,
) -> dict[str, Any]:
    """Run the model over every sequence and store the hidden states of its text tokens.

    Sequences are batched by similar length and padded on the right; padded positions are
    masked in attention and never stored (right padding leaves a causal model's real
    positions unchanged). ``batch_size`` is a number of sequences or ``auto`` (see
    automatic_batch_size); a batch that runs out of device memory is split and retried.
    Writes into ``out_folder`` and returns the metadata written.
    """
    sequences = sequences_of(tokens)
    text_counts = [int((~s.is_special).sum()) for s in sequences]
    offsets = np.concatenate([[0], np.cumsum(text_counts)]).astype(np.int64)
    n_rows = int(offsets[-1])
    if n_rows == 0:
        raise LayerlawsError("the tokens table holds no text tokens; nothing to extract")
    n_layers = facts.num_layers
    out = Path(out_folder)
    out.mkdir(parents=True, exist_ok=True)
    arrays = [
        np.lib.format.open_memmap(
            out / layer_file(layer), mode="w+", dtype=np.float32, shape=(n_rows, facts.hidden_size)
        )
        for layer in range(n_layers + 1)
    ]
    lengths = [len(s.token_ids) for s in sequences]
    if batch_size == "auto":
        dtype_bytes = next(model.parameters()).element_size()
        batch_size = automatic_batch_size(facts, max(lengths), device, dtype_bytes)
        log.info("batch size %d (auto, %s)", batch_size, device)
    batches = length_sorted_batches(lengths, int(batch_size))
    started = time.perf_counter()
    n_tokens = retries = 0
    bar = tqdm(batches, desc="extract", unit="batch", disable=not progress, mininterval=5)

    def store(batch: list[int]) -> None:
        """Run one batch and write its text tokens' states into the layer arrays."""
        width = max(lengths[i] for i in batch)
        input_ids = torch.zeros((len(batch), width), dtype=torch.long)
        attention = torch.zeros((len(batch), width), dtype=torch.long)
        for row, i in enumerate(batch):
            input_ids[row, : lengths[i]] = torch.tensor(sequences[i].token_ids)
            attention[row, : lengths[i]] = 1
        recorded: list[int] = []

        def record(layer: int, state: torch.Tensor) -> None:
            if state.shape[:2] != (len(batch), width):
                raise LayerlawsError(
                    f"layer {layer} of this {facts.model_type!r} model has shape "
                    f"{tuple(state.shape)}, expected ({len(batch)}, {width}, …)"
                )
            values = state.float().cpu().numpy()
            for row, i in enumerate(batch):
                text = ~sequences[i].is_special
                arrays[layer][offsets[i] : offsets[i + 1]] = values[row, : lengths[i]][text]
            recorded.append(layer)

        with layer_states(model, record):
            model(
                input_ids=input_ids.to(device),
                attention_mask=attention.to(device),
                use_cache=False,
            )
        if recorded != list(range(n_layers + 1)):
            raise LayerlawsError(
                f"the forward pass reached layers {recorded}, expected 0..{n_layers} once each"
            )

    for batch in bar:
        retries += run_splitting_on_oom(store, batch, device)
        n_tokens += sum(lengths[i] for i in batch)
        bar.set_postfix(tokens_per_s=f"{n_tokens / (time.perf_counter() - started):.0f}")
    for array in arrays:
        array.flush()
    seconds = time.perf_counter() - started
    rows = pl.DataFrame(
        {
            "row": np.arange(n_rows, dtype=np.int64),
            "sentence_id": np.repeat([s.sentence_id for s in sequences], text_counts),
            "position": np.concatenate([np.flatnonzero(~s.is_special) for s in sequences]).astype(
                np.int32
            ),
            "token_id": np.concatenate([s.token_ids[~s.is_special] for s in sequences]),
        }
    )
    rows.write_parquet(out / ROWS)
    metadata = {
        **asdict(facts),
        "n_rows": n_rows,
        "n_sequences": len(sequences),
        "compute_dtype": str(next(model.parameters()).dtype).removeprefix("torch."),
        "storage_dtype": "float32",
        "device": device,
        "batch_size": batch_size,
        "out_of_memory_retries": retries,
        "seconds": round(seconds, 3),
        "tokens_per_second": round(n_tokens / seconds, 1) if seconds > 0 else None,
    }
    (out / METADATA).write_text(json.dumps(metadata, indent=2) + "\n")
    return metadata


@dataclass(frozen=True)
class HiddenStates:
    """Read access to a hidden-state folder (arrays are memory-mapped, never loaded whole)."""

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
                f"hidden-state cache {path} is missing or corrupt ({error}); delete the folder "
                f"and rerun the workflow to extract it again"
            ) from error
        return cls(path, metadata, rows)

    @property
    def num_layers(self) -> int:
        return int(self.metadata["num_layers"])

    @property
    def hidden_size(self) -> int:
        return int(self.metadata["hidden_size"])

    def layer(self, layer: int) -> np.ndarray:
        """Hidden states after block ``layer``, shape (n_rows, hidden_size), memory-mapped."""
        path = self.folder / layer_file(layer)
        try:
            array = np.load(path, mmap_mode="r")
        except (OSError, ValueError) as error:
            raise LayerlawsError(
                f"hidden-state file {path} is missing or corrupt ({error}); delete "
                f"{self.folder} and rerun the workflow to extract it again"
            ) from error
        expected = (len(self.rows), self.hidden_size)
        if array.shape != expected:
            raise LayerlawsError(
                f"hidden-state file {path} has shape {array.shape}, expected {expected}; "
                f"delete {self.folder} and rerun the workflow"
            )
        return array
