"""Training a small causal LM from scratch (``training.<key>``), with checkpoints that are
models in their own right and that a run resumes from.

A run writes ``<folder>/step_<NNNNNN>/`` at every checkpoint step: the weights
(``save_pretrained``, float32 safetensors), the tokenizer, ``checkpoint.json`` (step,
tokens seen, losses so far, the run's fingerprint) and, in the latest checkpoint only,
``training_state.pt`` (optimizer state and the loss curve). Each is written under a
temporary name and renamed when complete. A run that finds checkpoints of the same
fingerprint resumes from the latest one and ends with the same weights as an
uninterrupted run; checkpoints of another fingerprint are deleted first.

A run may stop early, at a segment end (``plan.segment_ends``: a checkpoint, a multiple
of ``segment_steps`` or the last step), and a later run go on from there: the workflow
trains one segment per job, so the checkpoints saved early are measured while the training
goes on, and no job runs longer than a cluster partition allows. A run that stops where no
checkpoint is saves a resume point there, a folder like a checkpoint's (the weights and
state the next run goes on from), removed whole once a later save holds the state; it is
no model of the workflow's.
"""

from __future__ import annotations

import json
import logging
import shutil
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import torch

from layerlaws.core.errors import LayerlawsError
from layerlaws.training.parallel import check_split, rank_rows
from layerlaws.training.plan import (
    ROPE_FAMILIES,
    TrainingSpec,
    batch_indices,
    checkpoint_folder,
    learning_rate_at,
    pack_sequences,
    segment_ends,
)
from layerlaws.training.ranks import SINGLE, Ranks

log = logging.getLogger(__name__)

CHECKPOINT_FILE = "checkpoint.json"
STATE_FILE = "training_state.pt"


def model_config(spec: TrainingSpec, tokenizer: Any) -> Any:
    """The transformers config of the model to train: ``spec``'s architecture and sizes,
    the tokenizer's vocabulary, no dropout (so a run is a function of its seed)."""
    from transformers import GPT2Config, LlamaConfig, Qwen2Config

    vocab_size = len(tokenizer)
    special = {"bos_token_id": tokenizer.bos_token_id, "eos_token_id": tokenizer.eos_token_id}
    if spec.architecture in ROPE_FAMILIES:
        family = {"llama": LlamaConfig, "qwen2": Qwen2Config}[spec.architecture]
        return family(
            vocab_size=vocab_size,
            hidden_size=spec.hidden_size,
            intermediate_size=spec.intermediate_size,
            num_hidden_layers=spec.num_layers,
            num_attention_heads=spec.num_heads,
            num_key_value_heads=spec.num_heads,
            head_dim=spec.head_dim,
            max_position_embeddings=spec.context,
            tie_word_embeddings=spec.tie_embeddings,
            **special,
        )
    return GPT2Config(
        vocab_size=vocab_size,
        n_embd=spec.hidden_size,
        n_inner=spec.intermediate_size,
        n_layer=spec.num_layers,
        n_head=spec.num_heads,
        n_positions=spec.context,
        resid_pdrop=0.0,
        embd_pdrop=0.0,
        attn_pdrop=0.0,
        tie_word_embeddings=spec.tie_embeddings,
        **special,
    )


def initial_model(spec: TrainingSpec, config: Any) -> Any:
    """The model at step 0, float32, seeded by ``spec.seed``: transformers' initialisation
    (``init: default``), or with every weight matrix redrawn by ``normal_fan_in_``."""
    from transformers import AutoModelForCausalLM

    torch.manual_seed(spec.seed)
    model = AutoModelForCausalLM.from_config(config, dtype=torch.float32)
    if spec.init == "normal_fan_in":
        normal_fan_in_(model)
    return model


def input_dimension(module: torch.nn.Module) -> int | None:
    """d_in of a module's weight matrix: the features a linear map reads (``nn.Linear``
    stores (out, in), GPT-2's ``Conv1D`` (in, out)); an embedding's one-hot input, of the
    size of its table (Yao & Xu §3: W^E ∈ R^{d × d_vob} maps e_x to W^E e_x); None for a
    module without one."""
    from transformers.pytorch_utils import Conv1D

    if isinstance(module, torch.nn.Linear):
        return module.in_features
    if isinstance(module, Conv1D):
        return module.weight.shape[0]
    if isinstance(module, torch.nn.Embedding):
        return module.num_embeddings
    return None


@torch.no_grad()
def normal_fan_in_(model: torch.nn.Module) -> None:
    """Redraw every weight matrix W of ``model`` in place as W_ij ~ N(0, 1/d_in), d_in its
    ``input_dimension`` (Yao & Xu, Appendix A), from torch's global generator; biases and
    norms keep their initialisation. A matrix shared by two modules (tied W_E = W_U) is
    drawn once, as the first module that holds it (the input embedding) sees it."""
    drawn: set[int] = set()
    for module in model.modules():
        fan_in = input_dimension(module)
        if fan_in is None or id(module.weight) in drawn:
            continue
        module.weight.normal_(0.0, fan_in**-0.5)
        drawn.add(id(module.weight))


FUSED_DEVICES = ("cpu", "cuda")
"""Devices where PyTorch's AdamW has its fused kernel (one kernel over every parameter
rather than a loop of small operations per parameter)."""


def optimizer_of(spec: TrainingSpec, model: Any) -> torch.optim.AdamW:
    """AdamW; weight decay on matrices only (not on norms, biases or 1-d weights); the
    fused implementation where every parameter is on a ``FUSED_DEVICES`` device, else the
    multi-tensor one (the same update up to float rounding)."""
    decayed = [p for p in model.parameters() if p.requires_grad and p.dim() >= 2]
    other = [p for p in model.parameters() if p.requires_grad and p.dim() < 2]
    fused = all(p.device.type in FUSED_DEVICES for p in decayed + other)
    return torch.optim.AdamW(
        [
            {"params": decayed, "weight_decay": spec.weight_decay},
            {"params": other, "weight_decay": 0.0},
        ],
        lr=spec.learning_rate,
        betas=spec.betas,
        fused=fused,
        foreach=None if fused else True,
    )


@torch.no_grad()
def held_out_loss(model: Any, sequences: torch.Tensor, batch_size: int, device: str) -> float:
    """Mean next-token cross-entropy (nats) over every prediction of ``sequences``
    (n, context)."""
    was_training = model.training
    model.eval()
    total, count = 0.0, 0
    for start in range(0, len(sequences), batch_size):
        batch = sequences[start : start + batch_size].to(device)
        with _autocast(device):
            logits = model(input_ids=batch).logits[:, :-1].float()
        targets = batch[:, 1:]
        total += torch.nn.functional.cross_entropy(
            logits.reshape(-1, logits.shape[-1]), targets.reshape(-1), reduction="sum"
        ).item()
        count += targets.numel()
    model.train(was_training)
    return total / count


def _autocast(device: str) -> Any:
    """bfloat16 autocast on a GPU, nothing on a CPU (float32 there)."""
    return torch.autocast("cuda", dtype=torch.bfloat16, enabled=device.startswith("cuda"))


@dataclass
class TrainingRun:
    """What a run produced: the loss curve (one row per step) and its checkpoints."""

    curve: list[dict[str, Any]] = field(default_factory=list)
    checkpoints: list[dict[str, Any]] = field(default_factory=list)
    resumed_from: int | None = None
    seconds: float = 0.0
    """Wall-clock seconds of the steps run, their evaluations and saves included."""
    tokens_per_second: float = 0.0
    evaluation_seconds: float = 0.0
    """Of ``seconds``, those of the held-out evaluations."""
    saving_seconds: float = 0.0
    """Of ``seconds``, those of the checkpoints and resume points written."""


def _read_json(path: Path) -> dict[str, Any] | None:
    try:
        return json.loads(path.read_text())
    except (OSError, ValueError):
        return None


def resumable_checkpoint(folder: Path, fingerprint: str, until: int) -> Path | None:
    """The latest complete checkpoint of this run at step ``until`` or before that holds a
    training state; checkpoints of other runs (another fingerprint) are deleted."""
    latest = None
    for partial in folder.glob("step_*.partial"):
        log.warning("deleting %s: a checkpoint whose writing was interrupted", partial)
        shutil.rmtree(partial)
    for candidate in sorted(folder.glob("step_*")):
        saved = _read_json(candidate / CHECKPOINT_FILE)
        if saved is None or saved.get("fingerprint") != fingerprint:
            log.warning("deleting %s: it belongs to another training run", candidate)
            shutil.rmtree(candidate)
        elif saved["step"] <= until and (candidate / STATE_FILE).is_file():
            latest = candidate
    return latest


def _save_checkpoint(
    folder: Path,
    model: Any,
    tokenizer: Any,
    record: dict[str, Any],
    state: dict[str, Any],
    previous: Path | None,
    checkpoints: Sequence[int],
) -> Path:
    final = checkpoint_folder(folder, record["step"])
    temporary = final.with_name(final.name + ".partial")
    shutil.rmtree(temporary, ignore_errors=True)
    model.save_pretrained(temporary)
    tokenizer.save_pretrained(temporary)
    torch.save(state, temporary / STATE_FILE)
    (temporary / CHECKPOINT_FILE).write_text(json.dumps(record, indent=2) + "\n")
    shutil.rmtree(final, ignore_errors=True)
    temporary.rename(final)
    if previous is not None:
        _supersede(previous, checkpoints)
    return final


def _supersede(previous: Path, checkpoints: Sequence[int]) -> None:
    """A later save holds the run's state: the ``previous`` save keeps its weights when it is
    one of the ``checkpoints`` (a model of its own) and drops its state; a resume point
    goes whole."""
    saved = _read_json(previous / CHECKPOINT_FILE)
    if saved is not None and saved["step"] in checkpoints:
        (previous / STATE_FILE).unlink(missing_ok=True)
    else:
        shutil.rmtree(previous, ignore_errors=True)


def train(
    spec: TrainingSpec,
    config: Any,
    tokenizer: Any,
    sequences: np.ndarray,
    *,
    held_out: np.ndarray | None,
    folder: str | Path,
    device: str,
    until: int | None = None,
    on_checkpoint: Callable[[int], None] | None = None,
) -> TrainingRun:
    """Train ``config``'s model on packed ``sequences`` (n, context) of token ids (any
    integer type; memory-mapped from disk for a whole source: only each step's rows are
    read) as ``spec`` says, on ``device``, up to step ``until`` (a segment end: a
    checkpoint step, a multiple of ``segment_steps`` where it saves a resume point, or the
    last step, the default), saving checkpoints into ``folder``.
    The run resumes from the latest checkpoint of the same run at ``until`` or before that
    holds a training state (so a run that finds ``until``'s own trains nothing). A
    checkpoint it passes that is already saved, other than ``until``'s, is kept as it is:
    a measurement may be reading it, and the run is deterministic. ``held_out`` (m,
    context) gives the held-out loss at every checkpoint and every ``eval_every`` steps.
    ``on_checkpoint(step)`` is called after each checkpoint is passed.

    Under ``torchrun`` (an initialised process group, ``Ranks.of_group``) the run is one
    rank of a data-parallel training: every rank reads its slice of each step's batch
    (``parallel.rank_rows``) and takes the same update; rank 0 alone finds the resume
    point, evaluates (in passes of a rank's size, so its held-out loss may differ from one
    process's by float rounding), logs and saves, in the same format, so a run of N
    processes resumes from a run of one and back."""
    ranks = Ranks.of_group()
    stop = spec.steps if until is None else until
    if stop not in segment_ends(spec):
        raise LayerlawsError(
            f"a training stops at a segment end {segment_ends(spec)} (a checkpoint, a multiple "
            f"of segment_steps or its last step), not at step {stop}"
        )
    check_split(spec.batch_size, ranks.size)
    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    fingerprint = ranks.from_first(
        spec.fingerprint(sequences, held_out if held_out is not None else np.empty(0))
        if ranks.first
        else None
    )
    n_sequences = len(sequences)
    evaluation = torch.from_numpy(held_out) if held_out is not None else None
    result = TrainingRun()
    resume = ranks.from_first(
        resumable_checkpoint(folder, fingerprint, stop) if ranks.first else None
    )
    if resume is None:
        model, start = initial_model(spec, config).to(device), 0
        optimizer = optimizer_of(spec, model)
    else:
        from transformers import AutoModelForCausalLM

        state = torch.load(resume / STATE_FILE, map_location=device, weights_only=False)
        model = AutoModelForCausalLM.from_pretrained(resume, dtype=torch.float32).to(device)
        optimizer = optimizer_of(spec, model)
        optimizer.load_state_dict(state["optimizer"])
        start, result.curve = state["step"], state["curve"]
        result.resumed_from = start
        log.info("resuming from %s (step %d of %d)", resume, start, spec.steps)
    model.train()
    wrapped = ranks.wrap(model, device)
    stepped = torch.compile(wrapped) if spec.compile else wrapped
    previous = resume

    def evaluate() -> float | None:
        # in passes no larger than a rank's, in the GPU memory planned for them
        if evaluation is None or not ranks.first:
            return None
        passes = spec.micro_batch_size
        if ranks.size > 1:
            passes = min(passes, spec.batch_size // ranks.size)
        started = time.perf_counter()
        loss = held_out_loss(model, evaluation, passes, device)
        result.evaluation_seconds += time.perf_counter() - started
        return loss

    def checkpoint(step: int, held: float | None) -> None:
        nonlocal previous
        if step != stop and checkpoint_folder(folder, step).is_dir():
            log.info("keeping the checkpoint at step %d saved before", step)
        else:
            previous = save(step, held)
        if on_checkpoint is not None:
            on_checkpoint(step)

    def save(step: int, held: float | None) -> Path:
        started = time.perf_counter()
        train_losses = [row["train_loss"] for row in result.curve if row["step"] == step]
        record = {
            "step": step,
            "tokens_seen": spec.tokens_seen(step, n_sequences),
            "train_loss": train_losses[0] if train_losses else None,
            "held_out_loss": held,
            "fingerprint": fingerprint,
        }
        state = {"optimizer": optimizer.state_dict(), "step": step, "curve": result.curve}
        saved = _save_checkpoint(
            folder, model, tokenizer, record, state, previous, spec.checkpoints
        )
        what = "checkpoint" if step in spec.checkpoints else "resume point"
        log.info("%s at step %d (%d tokens seen)", what, step, record["tokens_seen"])
        result.saving_seconds += time.perf_counter() - started
        return saved

    if resume is None and 0 in spec.checkpoints and ranks.first:
        held = evaluate()
        result.curve.append(_curve_row(spec, n_sequences, 0, None, held))
        checkpoint(0, held)
    # Step 0's evaluation and save are not among the steps' seconds.
    result.evaluation_seconds = result.saving_seconds = 0.0
    started, pending = time.perf_counter(), []
    for step in range(start, stop):
        rate = learning_rate_at(spec, step)
        for group in optimizer.param_groups:
            group["lr"] = rate
        loss = accumulate_gradients(
            stepped,
            sequences,
            batch_indices(n_sequences, spec, step),
            spec.micro_batch_size,
            device,
            ranks,
        )
        torch.nn.utils.clip_grad_norm_(model.parameters(), spec.grad_clip)
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
        pending.append((step + 1, rate, loss))
        done = step + 1
        evaluated = done % spec.eval_every == 0 or done in spec.checkpoints or done == spec.steps
        if evaluated or done == stop:
            # Losses are read back only here, so a GPU never waits for them between steps.
            held = evaluate() if evaluated else None
            losses = ranks.mean(torch.stack([pending_loss for _, _, pending_loss in pending]))
            for (number, pending_rate, _), pending_loss in zip(pending, losses, strict=True):
                result.curve.append(
                    _curve_row(spec, n_sequences, number, pending_rate, None, float(pending_loss))
                )
            result.curve[-1]["held_out_loss"] = held
            pending.clear()
            if not ranks.first:
                continue
            elapsed = time.perf_counter() - started
            log.info(
                "step %d/%d: training loss %.4f, held-out loss %s, %.0f tokens/s",
                done,
                spec.steps,
                result.curve[-1]["train_loss"],
                "-" if held is None else f"{held:.4f}",
                (spec.tokens_seen(done, n_sequences) - spec.tokens_seen(start, n_sequences))
                / elapsed,
            )
            if done in spec.checkpoints:
                checkpoint(done, held)
            elif done == stop < spec.steps:  # a resume point, for the next segment
                previous = save(done, held)
    result.seconds = time.perf_counter() - started
    if result.seconds > 0:
        trained = spec.tokens_seen(stop, n_sequences) - spec.tokens_seen(start, n_sequences)
        result.tokens_per_second = trained / result.seconds
    ranks.wait()  # rank 0's saves are complete
    result.checkpoints = [
        json.loads((checkpoint_folder(folder, step) / CHECKPOINT_FILE).read_text())
        for step in spec.checkpoints
        if step <= stop
    ]
    return result


def accumulate_gradients(
    model: Any,
    sequences: np.ndarray,
    rows: np.ndarray,
    micro_batch_size: int,
    device: str,
    ranks: Ranks = SINGLE,
) -> torch.Tensor:
    """The gradients of the mean next-token loss over the packed ``sequences`` ``rows``
    (one optimizer step's batch) accumulated in ``model``; that loss, detached. A batch of
    more than ``micro_batch_size`` sequences runs in the fewest passes of at most
    ``micro_batch_size`` (sizes as equal as can be), each pass's loss weighted by its share
    of the sequences (all have ``context`` tokens, so the same number of predictions), so
    that the gradients are the whole batch's (up to float rounding).

    One rank of several (``model`` wrapped by ``Ranks.wrap``) passes its own slice of
    ``rows`` (``parallel.rank_rows``) the same way, each pass's loss weighted by its share
    of the whole batch times the ranks, as DistributedDataParallel averages the ranks'
    gradients: the averaged gradients are the whole batch's, and the loss returned is the
    rank's share times the ranks (their mean over the ranks is the batch's loss)."""
    mine = rank_rows(rows, ranks.rank, ranks.size)
    parts = np.array_split(mine, -(-len(mine) // micro_batch_size))
    total = None
    for index, part in enumerate(parts):
        batch = torch.from_numpy(np.asarray(sequences[part], dtype=np.int64))
        batch = batch.to(device, non_blocking=True)
        with ranks.holding_gradients(model, last=index == len(parts) - 1):
            with _autocast(device):
                loss = model(input_ids=batch, labels=batch).loss
            weight = ranks.size * len(part) / len(rows)
            if weight != 1.0:
                loss = loss * weight
            loss.backward()
        total = loss.detach() if total is None else total + loss.detach()
    return total


def _curve_row(
    spec: TrainingSpec,
    n_sequences: int,
    step: int,
    rate: float | None,
    held: float | None,
    train_loss: float | None = None,
) -> dict[str, Any]:
    return {
        "step": step,
        "tokens_seen": spec.tokens_seen(step, n_sequences),
        "learning_rate": rate,
        "train_loss": train_loss,
        "held_out_loss": held,
    }


def tokenize_texts(tokenizer: Any, texts: Sequence[str]) -> list[list[int]]:
    """Each text's token ids without special tokens (packing adds EOS between texts)."""
    return tokenizer(list(texts), add_special_tokens=False)["input_ids"]


def separator_id(tokenizer: Any) -> int:
    """The token that ends each packed text: EOS, else BOS."""
    for token_id in (tokenizer.eos_token_id, tokenizer.bos_token_id):
        if token_id is not None:
            return int(token_id)
    raise LayerlawsError(
        "the training tokenizer has neither an EOS nor a BOS token to separate packed texts"
    )


def packed_texts(tokenizer: Any, texts: Sequence[str], context: int) -> np.ndarray:
    """``texts`` tokenised and packed into (n, context) int64 sequences."""
    return pack_sequences(tokenize_texts(tokenizer, texts), separator_id(tokenizer), context)
