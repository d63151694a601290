"""The composite addition tasks of Yao & Xu (§5 and Appendix B) and their
probability signatures, computed from the data (NumPy only).

An input is X = [z, α1, α2]: a key z and two anchors α1, α2 ∈ A (each anchor an addition):
- ``add`` (f_add): z ∈ Z for every anchor pair, label y = z + α1 + α2;
- ``add_same_range`` (f̃_add): z ∈ Y − α1 − α2, so every anchor pair shares the label
  domain Y, label y = z + α1 + α2;
- ``mod`` (f_mod): z ∈ Z, label y = min Z + ((z + α1 + α2) mod |Z|).
The paper sets A = {11…20}, Y = Z = {101…140}. Tokens and labels share one vocabulary
(0 … the largest token or label).

The distinct inputs (anchor pair × key) are split, seeded, into training and test inputs;
the training set draws ``n_samples`` inputs uniformly with replacement from the training
inputs (the paper's data sets hold 50,000 pairs drawn from the whole task, so it reports
training accuracy only: a ``test_fraction`` of 0 keeps every input for training and leaves
the test set empty; a held-out split is ours). Signatures are counted from the training set
as Yao & Xu's §4 (Eq. 4) defines them, x′ over the tokens ``counted`` (``all``: every token
of the vocabulary, the anchors and α itself included, as Eq. 4 writes it; ``keys``: the
keys only, x′ ∉ A, Appendix B.1's P(z ∈ X | α ∈ X)):
- φ^y_α[ν] = P(y = ν | α ∈ X);
- φ^X_α[x′] = P(x′ ∈ X | α ∈ X);
- φ^{X|y}_α[ν, x′] = P(x′ ∈ X | α ∈ X, y = ν), flattened (0 where α never meets label ν);
- φ^X_ν[x] = P(x ∈ X | y = ν) over every token (the unembedding's signature, Fig. 4B).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from layerlaws.core.errors import LayerlawsError
from layerlaws.core.geometry import cosine_matrix, off_diagonal, r_cos

TASKS = ("add", "add_same_range", "mod")
SIGNATURE_INPUTS = ("all", "keys")
"""The tokens x′ of φ^X_α and φ^{X|y}_α: every token (Eq. 4, the default) or the keys."""
ANCHOR_SIGNATURES = ("label", "context", "context_given_label")
"""The signatures of the anchors (fields of ``Signatures``): φ^y, φ^X, φ^{X|y}."""


@dataclass(frozen=True)
class AdditionTask:
    """One task's definition: its kind (``TASKS``), anchors A and key/label range Z = Y."""

    kind: str
    anchors: tuple[int, ...]
    keys: tuple[int, ...]

    @classmethod
    def of(cls, kind: str, anchors: Sequence[int], keys: Sequence[int]) -> AdditionTask:
        """``anchors`` and ``keys`` as inclusive ranges [first, last]."""
        if kind not in TASKS:
            raise LayerlawsError(f"unknown addition task {kind!r}; known: {', '.join(TASKS)}")
        anchor_range = tuple(range(anchors[0], anchors[1] + 1))
        key_range = tuple(range(keys[0], keys[1] + 1))
        if set(anchor_range) & set(key_range) or min(key_range) <= 2 * max(anchor_range):
            raise LayerlawsError(
                f"synthetic: keys {keys} must lie above twice the largest anchor {anchors} "
                f"so that keys, anchors and the keys of add_same_range never overlap"
            )
        return cls(kind, anchor_range, key_range)

    def inputs(self) -> np.ndarray:
        """Every distinct input [z, α1, α2] of the task, (n, 3) int64, ordered by anchor pair
        then key."""
        rows = []
        for first in self.anchors:
            for second in self.anchors:
                keys = (
                    np.array(self.keys) - first - second
                    if self.kind == "add_same_range"
                    else np.array(self.keys)
                )
                rows += [(int(z), first, second) for z in keys]
        return np.array(rows, dtype=np.int64)

    def labels(self, inputs: np.ndarray) -> np.ndarray:
        """The label of each input (n, 3) → (n,) int64."""
        total = inputs.sum(axis=1)
        if self.kind == "mod":
            return min(self.keys) + (total % len(self.keys))
        return total

    @property
    def vocab_size(self) -> int:
        """Tokens 0 … the largest token or label."""
        return int(max(self.labels(self.inputs()).max(), max(self.keys), max(self.anchors))) + 1


@dataclass(frozen=True)
class AdditionData:
    """A task's training and test sets: inputs (n, 3) and labels (n,), int64."""

    train_inputs: np.ndarray
    train_labels: np.ndarray
    test_inputs: np.ndarray
    test_labels: np.ndarray


def generate(task: AdditionTask, n_samples: int, test_fraction: float, seed: int) -> AdditionData:
    """Split the distinct inputs (a ``test_fraction`` of them held out; none for 0, the
    paper's data: the test arrays are then empty, (0, 3) and (0,)) and draw ``n_samples``
    training inputs uniformly from the others, seeded."""
    rng = np.random.default_rng(seed)
    inputs = task.inputs()
    order = rng.permutation(len(inputs))
    held = round(test_fraction * len(inputs))
    test, train = inputs[order[:held]], inputs[order[held:]]
    drawn = train[rng.integers(0, len(train), n_samples)]
    return AdditionData(drawn, task.labels(drawn), test, task.labels(test))


@dataclass(frozen=True)
class Signatures:
    """The probability signatures of a training set (rows float64)."""

    label: np.ndarray
    """φ^y_α: (|A|, vocab)."""
    context: np.ndarray
    """φ^X_α: (|A|, vocab), 0 at the tokens not counted."""
    context_given_label: np.ndarray
    """φ^{X|y}_α: (|A|, vocab · vocab), flattened over (ν, x′), 0 at the tokens x′ not
    counted."""
    label_context: np.ndarray
    """φ^X_ν: (labels, vocab) over the task's label domain, in label order."""
    label_domain: np.ndarray
    """The labels ν of ``label_context`` (sorted)."""


def counted_tokens(task: AdditionTask, signature_inputs: str) -> np.ndarray:
    """The tokens x′ of φ^X_α and φ^{X|y}_α as a mask (vocab,): every token for ``all``,
    every token but the anchors for ``keys`` (``SIGNATURE_INPUTS``)."""
    if signature_inputs not in SIGNATURE_INPUTS:
        raise LayerlawsError(
            f"synthetic.signature_inputs: expected one of {', '.join(SIGNATURE_INPUTS)}; "
            f"got {signature_inputs!r}"
        )
    counted = np.ones(task.vocab_size, dtype=bool)
    if signature_inputs == "keys":
        counted[list(task.anchors)] = False
    return counted


def signatures(
    task: AdditionTask, inputs: np.ndarray, labels: np.ndarray, signature_inputs: str = "all"
) -> Signatures:
    """Count the signatures of the training set ``inputs`` (n, 3), ``labels`` (n,), x′ over
    the tokens of ``signature_inputs`` (``counted_tokens``)."""
    vocab = task.vocab_size
    present = np.zeros((len(inputs), vocab), dtype=bool)
    present[np.arange(len(inputs))[:, None], inputs] = True
    counted = counted_tokens(task, signature_inputs)
    one_hot_label = np.zeros((len(inputs), vocab))
    one_hot_label[np.arange(len(inputs)), labels] = 1.0
    label_rows, context_rows, joint_rows = [], [], []
    for anchor in task.anchors:
        with_anchor = present[:, anchor]
        count = with_anchor.sum()
        label_rows.append(one_hot_label[with_anchor].sum(axis=0) / count)
        context_rows.append(np.where(counted, present[with_anchor].sum(axis=0) / count, 0.0))
        joint = np.zeros((vocab, vocab))
        for label in np.unique(labels[with_anchor]):
            rows = with_anchor & (labels == label)
            joint[label] = present[rows].sum(axis=0) / rows.sum()
        joint[:, ~counted] = 0.0
        joint_rows.append(joint.ravel())
    domain = np.unique(labels)
    label_context = np.array([present[labels == label].mean(axis=0) for label in domain])
    return Signatures(
        np.array(label_rows), np.array(context_rows), np.array(joint_rows), label_context, domain
    )


def r_order(cosines: np.ndarray, anchors: Sequence[int]) -> float:
    """R_order = Corr(cos(·), |α − α′|) over the off-diagonal pairs (Pearson): −1 when
    similarity falls steadily with the anchors' distance."""
    values = np.asarray(anchors, dtype=np.float64)
    return r_cos(cosines, np.abs(values[:, None] - values[None, :]))


def signature_table(task: AdditionTask, found: Signatures) -> list[dict[str, object]]:
    """Per anchor signature: ``r_order`` of its cosines over the anchors, ``min_cosine``,
    the smallest between two anchors (1: identical across anchors), and ``cosine_spread``,
    the largest minus the smallest (0: every anchor pair looks alike, so the signature
    cannot order the anchors, as for φ^X of f_add when the anchors' own tokens are
    counted)."""
    rows: list[dict[str, object]] = []
    for name in ANCHOR_SIGNATURES:
        matrix = cosine_matrix(getattr(found, name))
        pairs = off_diagonal(matrix)
        rows.append(
            {
                "task": task.kind,
                "signature": name,
                "r_order": r_order(matrix, task.anchors),
                "min_cosine": float(pairs.min()),
                "cosine_spread": float(np.ptp(pairs)),
            }
        )
    return rows
