"""One forward pass of a model over a tokens table, feeding every layer's states of the
text tokens to observers (statistics, a hidden-state writer) while the model runs.

Sequences are batched by similar length and padded on the right; padded positions are
masked in attention and never observed (right padding leaves a causal model's real
positions unchanged). Special tokens (BOS, EOS) are never observed either. An
encoder–decoder reads a table of its two stacks (``layerlaws.forward.span_corruption``):
the encoder its input, the decoder its own; the observed rows are the decoder's, and its
encoder layers' states are read at each row's encoder position, so every layer's states
have the same rows. Which states are the layers is the pass's ``LayerChoice``
(``layerlaws.models.architectures``): an encoder–decoder's decoder alone reads the same
table, and its encoder alone a plain one (run without the decoder). For each batch
every observer first gets ``begin_batch`` (which rows follow), then ``observe(layer,
states)`` for layers 0..L in order, with ``states`` (n_text_tokens, hidden_size) in the
compute dtype on the device that layer runs on (``layerlaws.models.blocks.layer_states`` says
where each layer is taken). Logit observers get ``begin_batch`` too, then
``observe_logits(logits)`` with the model's output logits of the same rows
(n_text_tokens, vocab_size), after layer L. The interface, for an observer of one's own,
is ``layerlaws.forward.observers``.

A batch that runs out of device memory is split in halves and retried, recursively.
Layers are observed atomically: an observer's ``observe`` either completes or leaves no
trace, and the pass keeps, per observer, the first layer it has not yet observed for the
whole batch; the halves resume each observer there (an observer that completed layer k
before a later one ran out of memory at k resumes at k + 1), so nothing is counted
twice.

A pass given ``ProgressSaves`` (``layerlaws.core.progress``) saves, between batches and at
most every ``execution.checkpoint_minutes``, what every observer has merged (the
attributes each names in ``progress_attributes``), the batch size and how many batches of
the (deterministic) batch plan are done, with a hash of those batches' sequence ids. A rerun
restores the observers and skips those batches, so it ends with the same statistics as an
uninterrupted pass: bit-identical on a CPU, where batches are computed the same way. A
kill loses at most the batches since the last save (``checkpoint_minutes`` of work).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import polars as pl
import torch

from layerlaws.core.errors import LayerlawsError
from layerlaws.core.logs import ProgressLog
from layerlaws.core.progress import ProgressSaves, prefix_hash
from layerlaws.forward.batching import CPU_BATCH_SIZE, gpu_batch_size
from layerlaws.forward.observers import LogitObserver, Observer, progress_of, restore
from layerlaws.models.architectures import BLOCK_INPUTS, LayerChoice, layer_count
from layerlaws.models.architectures import encoder_layers as encoder_layer_count
from layerlaws.models.blocks import layer_states
from layerlaws.models.facts import ModelFacts

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class TokenSequence:
    """One tokenised sentence: its ids (T,) int64, which positions are special (T,) bool,
    the ids the model reads (T,) int64 (the same ids, or masked ones), and which rows have
    targets (T,) bool (every row, or the masked positions). For an encoder–decoder these
    are the decoder's, and the encoder's input and each row's encoder position come
    along."""

    sentence_id: int
    token_ids: np.ndarray
    is_special: np.ndarray
    input_ids: np.ndarray
    is_target: np.ndarray
    encoder_input_ids: np.ndarray | None = None
    """(T_e,) int64: what an encoder–decoder's encoder reads; None for one stack."""
    encoder_positions: np.ndarray | None = None
    """(T,) int64: where each row's encoder-layer states are read."""

    @property
    def length(self) -> int:
        """Tokens of the longest input the model reads (the decoder's or the encoder's)."""
        encoder = 0 if self.encoder_input_ids is None else len(self.encoder_input_ids)
        return max(len(self.token_ids), encoder)


def sequences_of(tokens: pl.DataFrame) -> list[TokenSequence]:
    """Split a tokens table into sequences, in order of first appearance. A masked table
    (``layerlaws.forward.masking``) brings its ``input_id`` and ``is_target`` columns; an
    encoder–decoder's (``layerlaws.forward.span_corruption``) its encoder's rows too."""
    ordered = tokens.sort(["sentence_id", "position"], maintain_order=True)
    if "input_id" not in ordered.columns:
        ordered = ordered.with_columns(input_id=pl.col("token_id"), is_target=pl.lit(True))
    sequences = []
    for key, part in ordered.group_by("sentence_id", maintain_order=True):
        encoder = None
        if "is_encoder" in part.columns:
            encoder = part.filter(pl.col("is_encoder"))["input_id"].to_numpy()
            part = part.filter(~pl.col("is_encoder"))
        sequences.append(
            TokenSequence(
                int(key[0]),
                part["token_id"].to_numpy(),
                part["is_special"].to_numpy(),
                part["input_id"].to_numpy(),
                part["is_target"].to_numpy(),
                encoder,
                None if encoder is None else part["encoder_position"].to_numpy(),
            )
        )
    return sequences


def observed_tokens(tokens: pl.DataFrame, special_tokens: str) -> pl.DataFrame:
    """The tokens table as the pass observes it: ``exclude`` keeps special tokens out of
    the rows (inputs and targets), ``include`` observes every position (He & Su's
    1 ≤ t ≤ T−1, BOS and EOS included) by marking none special."""
    if special_tokens == "include":
        return tokens.with_columns(is_special=pl.lit(False))
    return tokens


def first_rows(sequences: Sequence[TokenSequence]) -> np.ndarray:
    """(len(sequences) + 1,) int64: where each sequence's observed rows start among those
    of all sequences (the last entry is the number of rows)."""
    counts = [int((~sequence.is_special).sum()) for sequence in sequences]
    return np.concatenate([[0], np.cumsum(counts)]).astype(np.int64)


def text_rows(tokens: pl.DataFrame) -> pl.DataFrame:
    """The observed rows of a tokens table in row order (by sequence, then position):
    ``sentence_id``, ``position``, ``token_id`` of its text tokens, and ``is_target`` for
    a masked table."""
    columns = ["sentence_id", "position", "token_id"]
    return (
        tokens.filter(~pl.col("is_special"))
        .sort(["sentence_id", "position"], maintain_order=True)
        .select(*columns, *(["is_target"] if "is_target" in tokens.columns else []))
    )


def length_sorted_batches(
    lengths: list[int], batch_size: int, indices: Sequence[int] | None = None
) -> list[list[int]]:
    """Indices of sequences (of ``indices``; all by default) grouped into batches of
    similar length (longest first)."""
    chosen = range(len(lengths)) if indices is None else indices
    order = sorted(chosen, key=lambda i: (-lengths[i], i))
    return [order[start : start + batch_size] for start in range(0, len(order), batch_size)]


def automatic_batch_size(facts: ModelFacts, longest: int, device: str, dtype_bytes: int) -> int:
    """Sequences per batch that should fit in half the device's free memory
    (``layerlaws.forward.batching``). The estimate is rough on purpose: an out-of-memory
    batch is split and retried."""
    if not device.startswith("cuda"):
        return CPU_BATCH_SIZE
    free_bytes, _ = torch.cuda.mem_get_info(torch.device(device))
    return gpu_batch_size(
        free_bytes,
        longest=longest,
        num_layers=facts.num_layers,
        hidden_size=facts.hidden_size,
        dtype_bytes=dtype_bytes,
    )


@dataclass(frozen=True)
class Batch:
    """A batch as the model sees it, and where its text tokens are."""

    input_ids: torch.Tensor
    """(B, W) int64, sequences padded on the right."""
    attention_mask: torch.Tensor
    """(B, W) int64, 1 on real positions."""
    rows: pl.DataFrame
    """``sentence_id``, ``position``, ``token_id``, ``is_target`` of the observed (text)
    tokens, in the order of the observed states' rows."""
    row_numbers: np.ndarray
    """(n_text,) int64: each observed token's row in ``text_rows`` of the whole table."""
    batch_index: torch.Tensor
    """(n_text,) int64: the batch row of each observed token."""
    position_index: torch.Tensor
    """(n_text,) int64: its position."""
    encoder_input_ids: torch.Tensor | None = None
    """(B, W_e) int64: an encoder–decoder's encoder inputs, padded on the right (None for
    one stack; ``input_ids`` are then the decoder's)."""
    encoder_attention_mask: torch.Tensor | None = None
    """(B, W_e) int64, 1 on the encoder's real positions."""
    encoder_position_index: torch.Tensor | None = None
    """(n_text,) int64: each observed token's encoder position (its encoder layers'
    states)."""

    def model_inputs(self, device: str) -> dict[str, torch.Tensor]:
        """The keyword arguments of the model's forward call, on ``device``."""
        inputs = {
            "input_ids": self.input_ids.to(device),
            "attention_mask": self.attention_mask.to(device),
        }
        if self.encoder_input_ids is None:
            return inputs
        return {
            "input_ids": self.encoder_input_ids.to(device),
            "attention_mask": self.encoder_attention_mask.to(device),
            "decoder_input_ids": inputs["input_ids"],
            "decoder_attention_mask": inputs["attention_mask"],
        }

    @classmethod
    def of(
        cls, sequences: Sequence[TokenSequence], indices: list[int], row_starts: np.ndarray
    ) -> Batch:
        """The batch of ``sequences[i]`` for i in ``indices``; ``row_starts[i]`` is the first
        row of sequence i among the observed rows of the whole table."""
        lengths = [len(sequences[i].token_ids) for i in indices]
        width = max(lengths)
        input_ids = torch.zeros((len(indices), width), dtype=torch.long)
        attention = torch.zeros((len(indices), width), dtype=torch.long)
        batch_index, position_index, row_numbers, frames = [], [], [], []
        encoder_positions = []
        for row, (i, length) in enumerate(zip(indices, lengths, strict=True)):
            sequence = sequences[i]
            input_ids[row, :length] = torch.tensor(sequence.input_ids)
            attention[row, :length] = 1
            positions = np.flatnonzero(~sequence.is_special)
            batch_index.append(np.full(len(positions), row))
            position_index.append(positions)
            row_numbers.append(row_starts[i] + np.arange(len(positions)))
            if sequence.encoder_positions is not None:
                encoder_positions.append(sequence.encoder_positions[positions])
            frames.append(
                pl.DataFrame(
                    {
                        "sentence_id": np.full(
                            len(positions), sequence.sentence_id, dtype=np.int64
                        ),
                        "position": positions.astype(np.int32),
                        "token_id": sequence.token_ids[positions],
                        "is_target": sequence.is_target[positions],
                    }
                )
            )
        encoder: dict[str, torch.Tensor] = {}
        if sequences[indices[0]].encoder_input_ids is not None:
            encoder = _encoder_inputs([sequences[i].encoder_input_ids for i in indices])
            encoder["encoder_position_index"] = torch.from_numpy(
                np.concatenate(encoder_positions)
            ).long()
        return cls(
            input_ids,
            attention,
            pl.concat(frames),
            np.concatenate(row_numbers).astype(np.int64),
            torch.from_numpy(np.concatenate(batch_index)).long(),
            torch.from_numpy(np.concatenate(position_index)).long(),
            **encoder,
        )


def _encoder_inputs(ids: Sequence[np.ndarray]) -> dict[str, torch.Tensor]:
    """An encoder's inputs, padded on the right, and their attention mask."""
    width = max(len(sequence) for sequence in ids)
    input_ids = torch.zeros((len(ids), width), dtype=torch.long)
    attention = torch.zeros((len(ids), width), dtype=torch.long)
    for row, sequence in enumerate(ids):
        input_ids[row, : len(sequence)] = torch.from_numpy(sequence.astype(np.int64))
        attention[row, : len(sequence)] = 1
    return {"encoder_input_ids": input_ids, "encoder_attention_mask": attention}


class BatchOutOfMemory(Exception):
    """A batch ran out of device memory after each observer i had observed its layers <
    ``next_layers[i]``."""

    def __init__(self, next_layers: tuple[int, ...]) -> None:
        super().__init__(f"out of memory before layers {next_layers} were observed")
        self.next_layers = next_layers


def run_splitting_on_oom(
    process: Callable[[list[int], tuple[int, ...] | None], None],
    batch: list[int],
    device: str,
    first_layers: tuple[int, ...] | None = None,
) -> int:
    """``process(batch, first_layers)`` (each observer's first layer to observe; None: all
    from layer 0); when the device runs out of memory, process its two halves instead
    (recursively), each observer from the first layer it has not yet observed. Returns
    how many times a batch was split; a single sequence that does not fit is a
    LayerlawsError."""
    try:
        process(batch, first_layers)
        return 0
    except BatchOutOfMemory as error:
        next_layers = error.next_layers
        if len(batch) == 1:
            raise LayerlawsError(
                f"one sequence does not fit in the memory of {device}; lower the dataset's "
                f"max_tokens, run the model in bfloat16 (models.<key>.dtype), or give it "
                f"more GPUs"
            ) from None
    if device.startswith("cuda"):
        torch.cuda.empty_cache()
    half = len(batch) // 2
    log.warning(
        "out of memory with %d sequences on %s at layer %d; retrying as %d + %d",
        len(batch),
        device,
        min(next_layers, default=0),
        half,
        len(batch) - half,
    )
    return (
        1
        + run_splitting_on_oom(process, batch[:half], device, next_layers)
        + run_splitting_on_oom(process, batch[half:], device, next_layers)
    )


@torch.inference_mode()
def run_forward_pass(
    model: Any,
    facts: ModelFacts,
    tokens: pl.DataFrame,
    observers: Sequence[Observer],
    batch_size: int | str,
    device: str,
    progress: bool = True,
    logit_observers: Sequence[LogitObserver] = (),
    saves: ProgressSaves | None = None,
    sequence_indices: Sequence[int] | None = None,
    layers: LayerChoice = BLOCK_INPUTS,
) -> dict[str, Any]:
    """Run ``model`` over every sequence of ``tokens``, feeding ``observers`` the states of
    every layer (those ``layers`` chooses; ``facts.num_layers`` is their L) and
    ``logit_observers`` the output logits (none for an encoder run alone).

    ``batch_size`` is a number of sequences or ``auto`` (see automatic_batch_size);
    ``device`` is where the inputs go (the first layer's device). ``sequence_indices``
    (of the sequences in order of first appearance; all by default) runs a shard of the
    pass: its rows keep their numbers among the whole table's. With ``saves`` the pass
    resumes from the last save of the same inputs and saves its progress as it goes (the
    caller removes the save once its outputs are written). With ``progress`` it logs a
    line every 30 s at most with the batches done, the rate and the time left
    (``ProgressLog``). Returns a report: rows
    observed, sequences, batch size, out-of-memory retries, seconds, tokens per second,
    compute dtype, device, and the batches resumed from a save.
    """
    sequences = sequences_of(tokens)
    row_starts = first_rows(sequences)
    if row_starts[-1] == 0:
        raise LayerlawsError("the tokens table holds no text tokens; nothing to measure")
    chosen = range(len(sequences)) if sequence_indices is None else sequence_indices
    n_rows = int(sum(row_starts[i + 1] - row_starts[i] for i in chosen))
    lengths = [sequence.length for sequence in sequences]
    encoder_layers, forward = _checked_stacks(model, facts, sequences, layers)
    if layers.stack == "encoder" and logit_observers:
        raise LayerlawsError("an encoder run alone has no logits to observe")
    compute_dtype = model.get_input_embeddings().weight.dtype  # never quantised
    all_observers = [*observers, *logit_observers]
    devices = sorted({str(parameter.device) for parameter in model.parameters()})
    resumed = _resumed(saves, all_observers, sequences, lengths, devices, chosen) if saves else None
    if resumed is not None:
        batch_size = resumed["batch_size"]
    elif batch_size == "auto":
        longest = max((lengths[i] for i in chosen), default=1)
        batch_size = automatic_batch_size(facts, longest, device, compute_dtype.itemsize)
        log.info("batch size %d (auto, %s)", batch_size, device)
    last_layer = facts.num_layers
    # Per observer, the first layer it has not observed: the logits are observed as one more
    # layer, L + 1, so a split batch resumes each observer where it stopped.
    unobserved = (0,) * len(observers) + (last_layer + 1,) * len(logit_observers)
    complete = [last_layer + 1] * len(observers) + [last_layer + 2] * len(logit_observers)

    def process(indices: list[int], first_layers: tuple[int, ...] | None) -> None:
        batch = Batch.of(sequences, indices, row_starts)
        for observer in all_observers:
            observer.begin_batch(batch)
        observed = list(first_layers or unobserved)  # states' observers, then logits'

        def record(layer: int, state: torch.Tensor) -> None:
            if layer in observed[: len(observers)]:
                observe(layer, state)
            if layer == last_layer and not logit_observers:
                raise _BeforeHead

        def observe(layer: int, state: torch.Tensor) -> None:
            ids, positions = batch.input_ids, batch.position_index
            if layer < encoder_layers:
                ids, positions = batch.encoder_input_ids, batch.encoder_position_index
            if state.shape[:2] != ids.shape:
                raise LayerlawsError(
                    f"layer {layer} of this {facts.model_type!r} model has shape "
                    f"{tuple(state.shape)}, expected {tuple(ids.shape)} + (…)"
                )
            where = state.device
            text = state[batch.batch_index.to(where), positions.to(where)]
            for number, observer in enumerate(observers):
                if observed[number] == layer:
                    observer.observe(layer, text)
                    observed[number] = layer + 1

        out_of_memory = False
        try:
            with layer_states(model, record, layers):
                outputs = forward(**batch.model_inputs(device), use_cache=False)
            if logit_observers:
                where = outputs.logits.device
                logits = outputs.logits[batch.batch_index.to(where), batch.position_index.to(where)]
                del outputs
                for number, logit_observer in enumerate(logit_observers, start=len(observers)):
                    if observed[number] == last_layer + 1:
                        logit_observer.observe_logits(logits)
                        observed[number] = last_layer + 2
        except _BeforeHead:
            pass
        except torch.OutOfMemoryError:
            out_of_memory = True
        # Raised outside the handler: the frames holding the batch's tensors are released.
        if out_of_memory:
            raise BatchOutOfMemory(tuple(observed))
        if observed != complete:
            raise LayerlawsError(
                f"the forward pass left its observers at layers {observed}, expected {complete}"
            )

    batches = length_sorted_batches(lengths, int(batch_size), chosen)
    done = resumed["batches_done"] if resumed else 0
    started = time.perf_counter()
    n_tokens = retries = 0
    report = ProgressLog("forward pass", len(batches), "batches", done=done)
    for number, indices in enumerate(batches[done:], start=done + 1):
        retries += run_splitting_on_oom(process, indices, device)
        n_tokens += sum(lengths[i] for i in indices)
        if progress:
            rate = n_tokens / (time.perf_counter() - started)
            report.update(number, f"{rate:,.0f} tokens/s")
        if saves is not None and number < len(batches):
            state = {
                "batch_size": int(batch_size),
                "batches_done": number,
                "batches_hash": prefix_hash(_batch_ids(sequences, batches[:number])),
                "devices": devices,
                "observers": [progress_of(observer) for observer in all_observers],
            }
            saves.save_if_due(state, f"batch {number} of {len(batches)}")
    seconds = time.perf_counter() - started
    return {
        "n_rows": n_rows,
        "n_sequences": len(chosen),
        "n_tokens": n_tokens,
        "compute_dtype": str(compute_dtype).removeprefix("torch."),
        "device": device,
        "batch_size": batch_size,
        "out_of_memory_retries": retries,
        "seconds": round(seconds, 3),
        "tokens_per_second": round(n_tokens / seconds, 1) if seconds > 0 else None,
        "batches_resumed": done,
    }


class _BeforeHead(Exception):
    """Raised once the last layer is observed when nothing observes the logits: the
    forward pass stops before the output layer (a fifth of SmolLM2's operations)."""


def _checked_stacks(
    model: Any, facts: ModelFacts, sequences: Sequence[TokenSequence], layers: LayerChoice
) -> tuple[int, Any]:
    """How many of the observed layers are read at the rows' encoder positions (an
    encoder–decoder's both stacks: ``encoder_layers``) and what the pass calls (the model,
    or its encoder alone), once the tokens table is checked to be one for the stacks run:
    an encoder–decoder's table for an encoder–decoder run whole, a plain or masked one
    otherwise, and ``facts.num_layers`` the L of ``layers``."""
    encoder_layers = encoder_layer_count(model)
    two_stacks = sequences[0].encoder_input_ids is not None
    counted = layer_count(model, layers)
    if counted != facts.num_layers:
        raise LayerlawsError(
            f"the facts of this pass count {facts.num_layers} blocks, but its layer choice "
            f"({layers}) takes {counted} of the {facts.model_type!r} model "
            f"(layerlaws.models.facts.ModelFacts.counting)"
        )
    if two_stacks and not encoder_layers:
        raise LayerlawsError(
            f"this tokens table is an encoder–decoder's, but the {facts.model_type!r} model "
            f"has one stack of blocks; probe it with layerlaws.forward.masking.probe_tokens "
            f"without seq2seq"
        )
    if layers.stack == "encoder":
        if two_stacks:
            raise LayerlawsError(
                "an encoder–decoder's encoder run alone reads a plain tokens table, not one "
                "of both stacks"
            )
        return 0, model.get_encoder()
    if encoder_layers and not two_stacks:
        raise LayerlawsError(
            f"a {facts.model_type!r} model is an encoder–decoder: its pass reads a table of "
            f"both its stacks, made by layerlaws.forward.masking.probe_tokens with its "
            f"seq2seq vocabulary (layerlaws.forward.span_corruption.seq2seq_vocabulary) "
            f"under probe next_token or span_corruption (or, its encoder's layers alone, "
            f"a plain one)"
        )
    return (encoder_layers if layers.stack == "both" else 0), model


def _batch_ids(sequences: Sequence[TokenSequence], batches: Sequence[list[int]]) -> list[list[int]]:
    """The sentence ids of ``batches``, batch by batch: the units whose ``prefix_hash``
    records the rows merged so far."""
    return [[sequences[i].sentence_id for i in batch] for batch in batches]


def _resumed(
    saves: ProgressSaves,
    observers: Sequence[Observer | LogitObserver],
    sequences: Sequence[TokenSequence],
    lengths: list[int],
    devices: list[str],
    chosen: Sequence[int],
) -> dict[str, Any] | None:
    """The saved pass state, with ``observers`` restored from it; None when there is none
    or it cannot be used here (logged): made on other devices, by other observers, or
    from batches that are not the first this pass runs at the saved batch size."""
    state = saves.load()
    if state is None:
        return None
    if state["devices"] != devices or len(state["observers"]) != len(observers):
        log.warning(
            "discarding the progress save %s: made with the model on %s and %d observers, "
            "now on %s with %d",
            saves.path,
            state["devices"],
            len(state["observers"]),
            devices,
            len(observers),
        )
        return None
    done = state["batches_done"]
    batches = length_sorted_batches(lengths, state["batch_size"], chosen)
    ids = _batch_ids(sequences, batches)
    if not saves.prefix_matches(state["batches_hash"], ids, done, "merged batches"):
        return None
    for observer, attributes in zip(observers, state["observers"], strict=True):
        restore(observer, attributes)
    log.info("resuming the pass after batch %d (%d sequences)", state["batches_done"], len(chosen))
    return state
