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
from functools import lru_cache
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
"""The RoPE families (Llama-style blocks), by whether their query, key and value
projections carry biases."""

FREE_HEAD_FAMILIES = ("qwen2",)
"""The families whose heads need not add up to hidden_size (Yao & Xu's 12 × 64 on 512):
transformers' Qwen2 configuration allows it, its Llama configuration does not."""

CORPORA = ("sample", "source")
"""``training.<key>.corpus``: the dataset's sample (packed in memory), or its whole source
(streamed through the tokenizer and packed on disk, never whole in memory)."""

HASHED_ELEMENTS = 2**24
"""Elements of a corpus hashed at a time for a run's fingerprint (a corpus on disk is read
a part at a time)."""

INITIALISATIONS = ("default", "normal_fan_in")
"""``training.<key>.init``: transformers' own initialisation of the family, or every weight
matrix W drawn from N(0, 1/d_in) with d_in the dimension of its input (Yao & Xu,
Appendix A; ``training.train.normal_fan_in_``)."""

EXECUTION_ONLY = ("segment_steps", "compile")
"""``TrainingSpec`` fields that say how a run is executed, not what it computes (the same
weights, or the same up to float rounding): left out of its fingerprint."""


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
    """Sequences per optimizer step (with ``epochs``, about as many)."""
    micro_batch_size: int
    """The most sequences one forward and backward pass holds: a step of more runs in
    several passes, gradients summed (``train.accumulate_gradients``); ``batch_size``
    unless given."""
    steps: int
    epochs: int | None
    """None: the training reads its corpus's packed sequences ``batch_size`` at a time, a
    fresh permutation per pass, for as many passes as ``steps`` need; E: every packed
    sequence of the corpus is read exactly E times, each epoch's permutation cut into
    steps / E batches of as equal sizes as can be (``batch_indices``)."""
    corpus: str
    """One of CORPORA: what of its dataset the training reads."""
    token_budget: int | None
    """The corpus is cut to its first ``budget_sequences`` (token_budget // context)
    packed sequences; None: every packed sequence."""
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
    segment_steps: int | None
    """Steps between the ends of a run's jobs beside the checkpoints (``segment_ends``;
    None: at the checkpoints and the last step only). How a run is cut into jobs changes
    no weight, so it is left out of the fingerprint."""
    eval_every: int
    """Steps between held-out evaluations of the loss curve (and at every checkpoint)."""
    held_out_sequences: int
    compile: bool = False
    """Whether the training steps run the model through ``torch.compile``: the same
    weights up to float rounding, so, like ``segment_steps``, left out of the fingerprint
    (a run resumes across it)."""

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
            micro_batch_size=settings.get("micro_batch_size") or settings["batch_size"],
            steps=settings["steps"],
            epochs=settings.get("epochs"),
            corpus=settings.get("corpus", "sample"),
            token_budget=settings.get("token_budget"),
            learning_rate=settings["learning_rate"],
            warmup_steps=settings["warmup_steps"],
            final_learning_rate=settings["final_learning_rate"],
            weight_decay=settings["weight_decay"],
            betas=tuple(settings["betas"]),
            grad_clip=settings["grad_clip"],
            seed=settings["seed"],
            checkpoints=checkpoint_steps(settings["checkpoints"], settings["steps"]),
            segment_steps=settings.get("segment_steps"),
            eval_every=settings["eval_every"],
            held_out_sequences=settings["held_out_sequences"],
            compile=settings.get("compile", False),
        )

    @property
    def budget_sequences(self) -> int | None:
        """The packed sequences a ``token_budget`` keeps (None without one)."""
        return None if self.token_budget is None else self.token_budget // self.context

    def sequences_read(self, step: int, n_sequences: int) -> int:
        """Packed sequences read in the first ``step`` optimizer steps of a corpus of
        ``n_sequences`` (``batch_indices``)."""
        if self.epochs is None:
            return step * self.batch_size
        per_epoch = self.steps // self.epochs
        epoch, within = divmod(step, per_epoch)
        return epoch * n_sequences + within * n_sequences // per_epoch

    def tokens_seen(self, step: int, n_sequences: int | None = None) -> int:
        """Training tokens read after ``step`` optimizer steps of a corpus of
        ``n_sequences`` packed sequences; without it (before packing), as planned:
        ``batch_size`` sequences a step."""
        if n_sequences is None:
            return step * self.batch_size * self.context
        return self.sequences_read(step, n_sequences) * self.context

    def fingerprint(self, *data: np.ndarray) -> str:
        """A hash of the spec and the training data: a checkpoint with another
        fingerprint belongs to another run and is never resumed from."""
        settings = {
            name: value for name, value in asdict(self).items() if name not in EXECUTION_ONLY
        }
        digest = hashlib.sha256(json.dumps(settings, sort_keys=True).encode())
        for array in data:
            flat = np.ascontiguousarray(array).reshape(-1)
            for start in range(0, len(flat), HASHED_ELEMENTS):
                digest.update(flat[start : start + HASHED_ELEMENTS])
        return digest.hexdigest()[:16]


def head_size(settings: Mapping[str, Any]) -> int:
    """The head size of a ``training.<key>`` block: its ``head_dim``, else hidden_size /
    num_heads (which must then be a whole number). Only a ``FREE_HEAD_FAMILIES`` model may
    have heads whose sizes do not add up to hidden_size."""
    hidden, heads, given = settings["hidden_size"], settings["num_heads"], settings.get("head_dim")
    if given is None:
        if hidden % heads:
            raise LayerlawsError(
                f"training: hidden_size {hidden} is not a multiple of num_heads {heads}; "
                f"give head_dim"
            )
        return hidden // heads
    if settings["architecture"] not in FREE_HEAD_FAMILIES and given * heads != hidden:
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


def token_stream(texts: Sequence[Sequence[int]], eos_id: int) -> np.ndarray:
    """Texts' token ids, each followed by ``eos_id``, concatenated: (tokens,) int64."""
    return np.fromiter((token for text in texts for token in (*text, eos_id)), dtype=np.int64)


def pack_sequences(texts: Sequence[Sequence[int]], eos_id: int, context: int) -> np.ndarray:
    """Texts' token ids, each followed by ``eos_id``, concatenated and cut into
    (n_sequences, context) int64 sequences; the incomplete tail is dropped."""
    stream = token_stream(texts, eos_id)
    count = len(stream) // context
    return stream[: count * context].reshape(count, context)


def segment_ends(spec: TrainingSpec) -> tuple[int, ...]:
    """The steps at which a segmented run stops, one job each: every checkpoint, the last
    step (where the loss curve ends even when no checkpoint is saved there) and, with
    ``segment_steps``, every multiple of it (a job's end that is no checkpoint saves only
    what the next job resumes from), so that no job trains more than ``segment_steps``."""
    every = range(spec.segment_steps, spec.steps, spec.segment_steps) if spec.segment_steps else ()
    return tuple(sorted({*spec.checkpoints, spec.steps, *every}))


def previous_segment_end(spec: TrainingSpec, end: int) -> int | None:
    """The segment end before ``end`` (the step its segment starts from), None for the
    first segment."""
    earlier = [step for step in segment_ends(spec) if step < end]
    return earlier[-1] if earlier else None


def check_budget(n_sequences: int, spec: TrainingSpec, dataset: str) -> None:
    """A ``token_budget`` is met: the corpus packed ``n_sequences`` of its
    ``spec.budget_sequences``. Raises LayerlawsError, saying what to raise or lower, when
    the sample or source of ``dataset`` ran out before."""
    needed = spec.budget_sequences
    if needed is None or n_sequences >= needed:
        return
    what = f"the sample of dataset {dataset!r} makes"
    fix = (
        f"raise datasets.{dataset}.n_samples (about {needed / max(n_sequences, 1):.1f}× as "
        f"many texts) or lower the training's token_budget"
    )
    if spec.corpus == "source":
        what = f"the whole source of dataset {dataset!r} makes"
        fix = "lower the training's token_budget, or drop it to read the whole source"
    raise LayerlawsError(
        f"a token budget of {spec.token_budget:,} tokens needs {needed:,} packed sequences "
        f"of {spec.context} tokens, and {what} {n_sequences:,}; {fix}"
    )


def check_corpus_size(n_sequences: int, spec: TrainingSpec, key: str) -> None:
    """A corpus of ``n_sequences`` packed sequences gives training ``key`` a batch at every
    step: ``batch_size`` sequences without epochs, at least one per step with them.
    Raises LayerlawsError saying what to change."""
    if spec.epochs is None:
        batches_per_epoch(n_sequences, spec)
        return
    per_epoch = spec.steps // spec.epochs
    if n_sequences < per_epoch:
        raise LayerlawsError(
            f"training {key}: {spec.epochs} epoch(s) in {spec.steps:,} steps cut each epoch "
            f"into {per_epoch:,} batches, more than the {n_sequences:,} packed sequences of "
            f"its corpus; lower training.{key}.steps (to about "
            f"{steps_for_batches(n_sequences, spec):,} for batches of {spec.batch_size})"
        )


def steps_for_batches(n_sequences: int, spec: TrainingSpec) -> int:
    """The steps (a multiple of the epochs) in which ``spec.epochs`` epochs of
    ``n_sequences`` read about ``batch_size`` sequences a step."""
    return spec.epochs * max(1, round(n_sequences / spec.batch_size))


def batches_per_epoch(n_sequences: int, spec: TrainingSpec) -> int:
    """Full batches of ``spec.batch_size`` in ``n_sequences`` (a training without epochs);
    raises LayerlawsError when there is not one."""
    per_epoch = n_sequences // spec.batch_size
    if per_epoch == 0:
        raise LayerlawsError(
            f"the training corpus makes {n_sequences} sequences of {spec.context} tokens, "
            f"fewer than one batch ({spec.batch_size}); add texts (the dataset's n_samples "
            f"or source) or lower training.<key>.batch_size or context"
        )
    return per_epoch


@lru_cache(maxsize=2)
def epoch_order(n_sequences: int, seed: int, epoch: int) -> np.ndarray:
    """(n_sequences,) int64, read-only: the order of the packed sequences in ``epoch``, a
    permutation seeded by (seed, epoch), drawn once per epoch (a whole Pile subset packs
    tens of millions of sequences)."""
    order = np.random.default_rng([seed, epoch]).permutation(n_sequences)
    order.setflags(write=False)
    return order


def batch_indices(n_sequences: int, spec: TrainingSpec, step: int) -> np.ndarray:
    """The packed sequences optimizer step ``step`` reads, in the order of its epoch's
    permutation (``epoch_order``). Without epochs, ``batch_size`` of them, an epoch's
    incomplete last batch skipped; with E epochs, step w of each epoch's steps / E = S
    reads its sequences ⌊w·n/S⌋ … ⌊(w+1)·n/S⌋ − 1, so that every sequence is read once per
    epoch (a batch of ⌊n/S⌋ or ⌈n/S⌉; ``batch_size`` when n = S × batch_size)."""
    if spec.epochs is None:
        epoch, within = divmod(step, batches_per_epoch(n_sequences, spec))
        bounds = within * spec.batch_size, (within + 1) * spec.batch_size
    else:
        per_epoch = spec.steps // spec.epochs
        epoch, within = divmod(step, per_epoch)
        bounds = within * n_sequences // per_epoch, (within + 1) * n_sequences // per_epoch
    return epoch_order(n_sequences, spec.seed, epoch)[bounds[0] : bounds[1]]


def unigram_entropy(counts: np.ndarray) -> float:
    """Entropy (nats) of the token frequencies ``counts`` (vocab,): the loss of the best
    model that ignores context, the level a trained model should fall far below."""
    probabilities = counts[counts > 0] / counts.sum()
    return float(-(probabilities * np.log(probabilities)).sum())


def unigram_cross_entropy(counts: np.ndarray, held_out: np.ndarray) -> float:
    """Cross-entropy (nats) on the predicted tokens of ``held_out`` (every position but
    the first of each sequence, as the held-out loss counts them) of the unigram model of
    the training tokens' ``counts`` (vocab,) with add-one smoothing over the vocabulary:
    the held-out loss of the best model that ignores context."""
    log_probabilities = np.log((counts + 1.0) / (counts.sum() + len(counts)))
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
