"""The synthetic stage's settings (the config's ``synthetic`` block; Yao & Xu §5 and
Appendix A): what an addition task's data depend on, what its trained models depend on
and what its figures show, each read once from its rule's ``settings`` param. The
defaults are the paper's setting, for building settings by hand."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Self

from layerlaws.core.settings import (
    StageSettings,
    as_mapping,
    either,
    integer,
    nested,
    number,
    one_of,
    parsed,
    sequence_of,
)
from layerlaws.synthetic.tasks import SIGNATURE_INPUTS, AdditionTask

RANGE = sequence_of(integer, length=2)


class SyntheticSettings(StageSettings):
    """A base of the stage's settings: ``from_params`` reads a rule's ``settings`` param
    (the block's keys the rule depends on)."""

    where = "synthetic"

    @classmethod
    def from_params(cls, params: Any) -> Self:
        """From the ``settings`` param of the ``synthetic_data``, ``train_synthetic`` or
        ``plot_synthetic`` rule."""
        return cls.from_config(as_mapping(params).get("settings"))


@dataclass(frozen=True)
class TaskRanges(SyntheticSettings):
    """The ranges every addition task is built on."""

    anchors: tuple[int, int] = field(default=(11, 20), metadata=parsed(RANGE))
    """A = {first…last}: the anchor tokens (inclusive, ≥ 1)."""
    keys: tuple[int, int] = field(default=(101, 140), metadata=parsed(RANGE))
    """Z = Y = {first…last}: the key and label tokens (inclusive, above twice the largest
    anchor)."""

    def task(self, kind: str) -> AdditionTask:
        """The task ``kind`` (add, add_same_range, mod) on these ranges."""
        return AdditionTask.of(kind, self.anchors, self.keys)


@dataclass(frozen=True)
class SyntheticDataSettings(TaskRanges):
    """What a task's data and signatures depend on (besides its kind)."""

    n_samples: int = field(default=50000, metadata=parsed(integer))
    """Training samples drawn uniformly from the training inputs (≥ 1)."""
    test_fraction: float = field(default=0.2, metadata=parsed(number))
    """Share of the distinct inputs held out for the test accuracy, in [0, 1); 0: none,
    the paper's data drawn from the whole task (no test accuracy)."""
    data_seed: int = field(default=0, metadata=parsed(integer))
    """Seed of the split and the draws."""
    signature_inputs: str = field(default="all", metadata=parsed(one_of(*SIGNATURE_INPUTS)))
    """The tokens x′ of φ^X_α and φ^{X|y}_α: ``all`` (Yao & Xu's Eq. 4: every token, the
    anchors included) or ``keys`` (x′ ∉ A)."""


@dataclass(frozen=True)
class SyntheticTrainingSettings(TaskRanges):
    """How the models of one task are trained (Yao & Xu Appendix A; the data aside)."""

    hidden_size: int = field(default=200, metadata=parsed(integer))
    """d, the width of W_E and W_U (≥ 1)."""
    init_exponent: float = field(default=0.8, metadata=parsed(number))
    """γ: weights drawn from N(0, d^−γ)."""
    learning_rate: float = field(default=1e-5, metadata=parsed(number))
    """AdamW's learning rate (constant, > 0)."""
    weight_decay: float = field(default=0.01, metadata=parsed(number))
    """AdamW's weight decay (≥ 0; PyTorch's default, the paper does not say)."""
    batch_size: int = field(default=100, metadata=parsed(integer))
    """Samples per mini-batch (≥ 1)."""
    epochs: int = field(default=1000, metadata=parsed(integer))
    """Passes over the training samples (≥ 1)."""
    records: int | tuple[int, ...] = field(
        default=12, metadata=parsed(either(integer, sequence_of(integer)))
    )
    """Recorded epochs: a count (0 and log-spaced up to ``epochs``) or a list."""
    seeds: tuple[int, ...] = field(default=(0, 1, 2), metadata=parsed(sequence_of(integer)))
    """Initialisation and data order of each trained model."""
    snapshot_epoch: int = field(default=120, metadata=parsed(integer))
    """The epoch whose weights the PCA figures show (Yao & Xu Figs. 3B, 4C, 8, 9B: 120);
    always recorded; the last epoch when training is shorter (``snapshot``)."""

    @property
    def snapshot(self) -> int:
        """The recorded epoch of the snapshot: ``snapshot_epoch``, or ``epochs`` when
        training stops before it."""
        return min(self.snapshot_epoch, self.epochs)


@dataclass(frozen=True)
class ShownLabels:
    """The label ν at which the figures draw φ^{X|y}_α[ν, ·], per task (Yao & Xu Fig. 7:
    150 in f_add, 120 in f̃_add and f_mod, each task's average label)."""

    add: int = field(default=150, metadata=parsed(integer))
    add_same_range: int = field(default=120, metadata=parsed(integer))
    mod: int = field(default=120, metadata=parsed(integer))

    def of(self, task: str) -> int:
        """The label shown for ``task`` (a name of ``TASKS``)."""
        return getattr(self, task)


@dataclass(frozen=True)
class SyntheticPlotSettings(SyntheticSettings):
    """What the stage's figures depend on beyond its results."""

    shown_labels: ShownLabels = field(default=ShownLabels(), metadata=parsed(nested(ShownLabels)))
    """ν of the φ^{X|y} panels (Figs. 1A and 7), per task."""
