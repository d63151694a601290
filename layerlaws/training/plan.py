"""The plan of a training run from scratch, without torch: its settings, when it saves
checkpoints, its learning rate at each step, which packed sequences each step reads.

Everything here is a pure function of the settings and the step, so a run resumed from a
checkpoint continues exactly as an uninterrupted one would.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import numpy as np

from layerlaws.core.errors import LayerlawsError

TRAINABLE_FAMILIES = ("llama", "gpt2", "qwen2")
"""The families (rows of ``models.architectures.ARCHITECTURES``) a model is trained in
(Llama-style: RMSNorm, RoPE, SwiGLU; GPT-2 style: LayerNorm, learned positions, GELU;
Qwen2-style: Llama's with biases on the query, key and value projections, the
architecture of Yao & Xu, Appendix A)."""

ROPE_FAMILIES = {"llama": False, "qwen2": True}
"""The RoPE families (Llama-style blocks, heads of any size), by whether their query, key
and value projections carry biases."""

INITIALISATIONS = ("default", "normal_fan_in")
"""``training.<key>.init``: transformers' own initialisation of the family, or every weight
matrix W drawn from N(0, 1/d_in) with d_in the dimension of its input (Yao & Xu,
Appendix A; ``training.train.normal_fan_in_``)."""


@dataclass(frozen=True)
class TrainingSpec:
    """The settings of ``training.<key>`` that determine the trained weights (the
    tokenizer and corpus are given separately, as token ids)."""

    architecture: str
    num_layers: int
    hidden_size: int
    num_heads: int
    head_dim: int
    """Size of each attention head (queries, keys and values); the attention width is
    num_heads × head_dim, which may differ from hidden_size (Yao & Xu: 12 × 64 on 512)."""
    intermediate_size: int
    tie_embeddings: bool
    init: str
    """One of INITIALISATIONS."""
    context: int
    """Tokens per training sequence (texts are packed, each followed by EOS)."""
    batch_size: int
    """Sequences per optimizer step."""
    steps: int
    epochs: int | None
    """None: the training reads its sample's packed sequences, a fresh permutation per
    pass, for as many passes as ``steps`` need; E: its corpus is the first
    ``corpus_sequences`` of them, read exactly E times."""
    learning_rate: float
    warmup_steps: int
    final_learning_rate: float
    """The cosine decay's end, as a fraction of ``learning_rate``."""
    weight_decay: float
    betas: tuple[float, float]
    grad_clip: float
    seed: int
    """Seeds the initial weights and the data order."""
    checkpoints: tuple[int, ...]
    """Steps after which the weights are saved (0: the initialisation)."""
    eval_every: int
    """Steps between held-out evaluations of the loss curve (and at every checkpoint)."""
    held_out_sequences: int

    @classmethod
    def of(cls, settings: Mapping[str, Any]) -> TrainingSpec:
        """The spec of a validated ``training.<key>`` block."""
        return cls(
            architecture=settings["architecture"],
            num_layers=settings["num_layers"],
            hidden_size=settings["hidden_size"],
            num_heads=settings["num_heads"],
            head_dim=head_size(settings),
            intermediate_size=settings["intermediate_size"] or 4 * settings["hidden_size"],
            tie_embeddings=settings["tie_embeddings"],
            init=settings.get("init", "default"),
            context=settings["context"],
            batch_size=settings["batch_size"],
            steps=settings["steps"],
            epochs=settings.get("epochs"),
            learning_rate=settings["learning_rate"],
            warmup_steps=settings["warmup_steps"],
            final_learning_rate=settings["final_learning_rate"],
            weight_decay=settings["weight_decay"],
            betas=tuple(settings["betas"]),
            grad_clip=settings["grad_clip"],
            seed=settings["seed"],
            checkpoints=checkpoint_steps(settings["checkpoints"], settings["steps"]),
            eval_every=settings["eval_every"],
            held_out_sequences=settings["held_out_sequences"],
        )

    @property
    def corpus_sequences(self) -> int | None:
        """Packed sequences of a training of ``epochs`` epochs (steps × batch_size /
        epochs); None without ``epochs``."""
        if self.epochs is None:
            return None
        return self.steps * self.batch_size // self.epochs

    def tokens_seen(self, step: int) -> int:
        """Training tokens read after ``step`` optimizer steps."""
        return step * self.batch_size * self.context

    def fingerprint(self, *data: np.ndarray) -> str:
        """A hash of the spec and the training data: a checkpoint with another
        fingerprint belongs to another run and is never resumed from."""
        digest = hashlib.sha256(json.dumps(asdict(self), sort_keys=True).encode())
        for array in data:
            digest.update(np.ascontiguousarray(array).tobytes())
        return digest.hexdigest()[:16]


def head_size(settings: Mapping[str, Any]) -> int:
    """The head size of a ``training.<key>`` block: its ``head_dim``, else hidden_size /
    num_heads (which must then be a whole number). Only a RoPE family (llama, qwen2) may
    have heads whose sizes do not add up to hidden_size."""
    hidden, heads, given = settings["hidden_size"], settings["num_heads"], settings.get("head_dim")
    if given is None:
        if hidden % heads:
            raise LayerlawsError(
                f"training: hidden_size {hidden} is not a multiple of num_heads {heads}; "
                f"give head_dim"
            )
        return hidden // heads
    if settings["architecture"] not in ROPE_FAMILIES and given * heads != hidden:
        raise LayerlawsError(
            f"training: a {settings['architecture']} model's heads share hidden_size "
            f"({hidden}); head_dim {given} × num_heads {heads} does not"
        )
    return given


def checkpoint_folder(folder: str | Path, step: int) -> Path:
    """Where the checkpoint after ``step`` optimizer steps lies under a run's ``folder``."""
    return Path(folder) / f"step_{step:06d}"


def checkpoint_steps(checkpoints: int | Sequence[int], steps: int) -> tuple[int, ...]:
    """The steps a run of ``steps`` saves: an explicit list, or a count n: step 0, then
    n − 1 steps log-spaced from 1 to ``steps`` (rounded, repeats dropped)."""
    if isinstance(checkpoints, int):
        spaced = np.round(np.geomspace(1, steps, max(checkpoints - 1, 1))).astype(int)
        chosen = sorted({0, *spaced.tolist(), steps})
    else:
        chosen = sorted(set(checkpoints))
    beyond = [step for step in chosen if step > steps]
    if beyond:
        raise LayerlawsError(f"training: checkpoints {beyond} lie beyond steps ({steps})")
    return tuple(chosen)


def learning_rate_at(spec: TrainingSpec, step: int) -> float:
    """The learning rate of optimizer step ``step`` (0-based): linear warm-up over
    ``warmup_steps``, then cosine decay to ``final_learning_rate`` × the peak."""
    if step < spec.warmup_steps:
        return spec.learning_rate * (step + 1) / spec.warmup_steps
    span = max(spec.steps - spec.warmup_steps, 1)
    progress = min((step - spec.warmup_steps) / span, 1.0)
    floor = spec.final_learning_rate
    return spec.learning_rate * (floor + (1 - floor) * 0.5 * (1 + np.cos(np.pi * progress)))


def pack_sequences(texts: Sequence[Sequence[int]], eos_id: int, context: int) -> np.ndarray:
    """Texts' token ids, each followed by ``eos_id``, concatenated and cut into
    (n_sequences, context) int64 sequences; the incomplete tail is dropped."""
    stream = np.fromiter((token for text in texts for token in (*text, eos_id)), dtype=np.int64)
    count = len(stream) // context
    return stream[: count * context].reshape(count, context)


def segment_ends(spec: TrainingSpec) -> tuple[int, ...]:
    """The steps at which a segmented run stops, one job each: every checkpoint, and the
    last step (where the loss curve ends even when no checkpoint is saved there)."""
    return tuple(sorted({*spec.checkpoints, spec.steps}))


def previous_segment_end(spec: TrainingSpec, end: int) -> int | None:
    """The segment end before ``end`` (the step its segment starts from), None for the
    first segment."""
    earlier = [step for step in segment_ends(spec) if step < end]
    return earlier[-1] if earlier else None


def epoch_corpus(sequences: np.ndarray, spec: TrainingSpec, dataset: str) -> np.ndarray:
    """The packed ``sequences`` a training reads: all of them, or with ``spec.epochs`` the
    first ``spec.corpus_sequences`` (one epoch's worth). Raises LayerlawsError when the
    sample of ``dataset`` packs fewer."""
    needed = spec.corpus_sequences
    if needed is None:
        return sequences
    if len(sequences) < needed:
        raise LayerlawsError(
            f"{spec.epochs} epoch(s) of {spec.steps} steps × {spec.batch_size} sequences need "
            f"{needed:,} packed sequences of {spec.context} tokens, and the sample of dataset "
            f"{dataset!r} makes {len(sequences):,}; raise datasets.{dataset}.n_samples (about "
            f"{needed / len(sequences):.1f}× as many texts) or lower the training's steps"
        )
    return sequences[:needed]


def batches_per_epoch(n_sequences: int, spec: TrainingSpec) -> int:
    """Full batches of ``spec.batch_size`` in ``n_sequences``; raises LayerlawsError when
    there is not one."""
    per_epoch = n_sequences // spec.batch_size
    if per_epoch == 0:
        raise LayerlawsError(
            f"the training corpus makes {n_sequences} sequences of {spec.context} tokens, "
            f"fewer than one batch ({spec.batch_size}); add texts (the dataset's n_samples "
            f"or source) or lower training.<key>.batch_size or context"
        )
    return per_epoch


def batch_indices(n_sequences: int, spec: TrainingSpec, step: int) -> np.ndarray:
    """(batch_size,) int64: the packed sequences optimizer step ``step`` reads. Each epoch
    is a fresh permutation seeded by (seed, epoch); an epoch's incomplete last batch is
    skipped."""
    epoch, within = divmod(step, batches_per_epoch(n_sequences, spec))
    order = np.random.default_rng([spec.seed, epoch]).permutation(n_sequences)
    return order[within * spec.batch_size : (within + 1) * spec.batch_size]


def unigram_entropy(sequences: np.ndarray) -> float:
    """Entropy (nats) of the token frequencies of ``sequences``: the loss of the best
    model that ignores context, the level a trained model should fall far below."""
    counts = np.bincount(sequences.ravel())
    probabilities = counts[counts > 0] / counts.sum()
    return float(-(probabilities * np.log(probabilities)).sum())


def unigram_cross_entropy(sequences: np.ndarray, held_out: np.ndarray, vocab_size: int) -> float:
    """Cross-entropy (nats) on the predicted tokens of ``held_out`` (every position but
    the first of each sequence, as the held-out loss counts them) of the unigram model of
    ``sequences`` with add-one smoothing over ``vocab_size`` tokens: the held-out loss of
    the best model that ignores context."""
    counts = np.bincount(sequences.ravel(), minlength=vocab_size).astype(np.float64) + 1.0
    log_probabilities = np.log(counts / counts.sum())
    return float(-log_probabilities[held_out[:, 1:].ravel()].mean())


def parameter_count(spec: TrainingSpec, vocab_size: int) -> int:
    """Parameters of the model ``spec`` trains with a vocabulary of ``vocab_size``
    (embeddings counted twice when untied; norms and biases included)."""
    hidden, inner = spec.hidden_size, spec.intermediate_size
    embeddings = vocab_size * hidden * (1 if spec.tie_embeddings else 2)
    if spec.architecture in ROPE_FAMILIES:
        attention = spec.num_heads * spec.head_dim
        biases = 3 * attention if ROPE_FAMILIES[spec.architecture] else 0
        block = 4 * hidden * attention + biases + 3 * hidden * inner + 2 * hidden
        return embeddings + spec.num_layers * block + hidden
    block = 4 * hidden * hidden + 2 * hidden * inner + 9 * hidden + inner
    return embeddings + spec.context * hidden + spec.num_layers * block + 2 * hidden
