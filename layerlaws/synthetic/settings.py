"""The synthetic stage's settings (the config's ``synthetic`` block; Yao & Xu §5 and
Appendix A): what an addition task's data depend on, what its trained models depend on
and what its figures show, each read once from its rule's ``settings`` param. The
defaults are the paper's setting, for building settings by hand."""

from __future__ import annotations

from layerlaws.core.settings import StageSettings, settings_of
from layerlaws.synthetic.tasks import AdditionTask


@settings_of("synthetic")
class TaskRanges(StageSettings):
    """The ranges every addition task is built on."""

    anchors: tuple[int, int]
    keys: tuple[int, int]

    def task(self, kind: str) -> AdditionTask:
        """The task ``kind`` (add, add_same_range, mod) on these ranges."""
        return AdditionTask.of(kind, self.anchors, self.keys)


@settings_of("synthetic")
class SyntheticDataSettings(TaskRanges):
    """What a task's data and signatures depend on (besides its kind)."""

    n_samples: int
    test_fraction: float
    data_seed: int
    signature_inputs: str


@settings_of("synthetic")
class SyntheticTrainingSettings(TaskRanges):
    """How the models of one task are trained (Yao & Xu Appendix A; the data aside)."""

    hidden_size: int
    init_exponent: float
    learning_rate: float
    weight_decay: float
    batch_size: int
    epochs: int
    records: int | tuple[int, ...]
    seeds: tuple[int, ...]
    snapshot_epoch: int

    @property
    def snapshot(self) -> int:
        """The recorded epoch of the snapshot: ``snapshot_epoch``, or ``epochs`` when
        training stops before it."""
        return min(self.snapshot_epoch, self.epochs)


@settings_of("synthetic.shown_labels")
class ShownLabels(StageSettings):
    """The label ν at which the figures draw φ^{X|y}_α[ν, ·], per task (Yao & Xu Fig. 7:
    150 in f_add, 120 in f̃_add and f_mod, each task's average label)."""

    add: int
    add_same_range: int
    mod: int

    def of(self, task: str) -> int:
        """The label shown for ``task`` (a name of ``TASKS``)."""
        return getattr(self, task)


@settings_of("synthetic")
class SyntheticPlotSettings(StageSettings):
    """What the stage's figures depend on beyond its results."""

    shown_labels: ShownLabels
