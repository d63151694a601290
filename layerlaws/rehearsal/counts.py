"""The counts of a config divided by one factor, for a rehearsal on tiny stand-ins
(``rehearsal.divide_counts_by``; 1 leaves the config as written).

What is divided is what makes a job long without changing what it runs: the texts
sampled from each dataset, the coupling prompts (and those whose Jacobians are measured),
a training's optimizer steps and segment_steps (by the factor squared for a whole-source
training), warm-up, sequences per step (and per pass) and held-out sequences, and the
addition tasks' samples and epochs.
Each count becomes ⌈count / factor⌉, never below 1 (and never above what another count
bounds: the warm-up below the steps, the snapshot epoch within the epochs, a training's
steps a multiple of its epochs, the Jacobian prompts the same number from each dataset of
their set). Widths, depths, context lengths, seeds and every setting of a measurement are
left as written.
Torch-free: the workflow applies it once, right after validating the config.
"""

from __future__ import annotations

import copy
import math
from collections.abc import Mapping
from typing import Any

from layerlaws.coupling.subset import largest_valid_count
from layerlaws.pipeline.expansion import checkpoint_key
from layerlaws.training.plan import checkpoint_steps

TRAINING_COUNTS = (
    "steps",
    "segment_steps",
    "batch_size",
    "micro_batch_size",
    "held_out_sequences",
    "eval_every",
)
"""A training's counts divided (``warmup_steps`` follows the steps)."""
PROMPT_COUNTS = ("n_from_dataset", "jacobian_prompts")
"""A coupling prompt set's counts divided (null stays null: every prompt)."""


def divided(count: int | None, factor: int) -> int | None:
    """⌈count / factor⌉, at least 1; None stays None."""
    return None if count is None else max(1, math.ceil(count / factor))


def divided_counts(config: Mapping[str, Any]) -> dict[str, Any]:
    """A copy of the validated ``config`` with its counts divided by
    ``config["rehearsal"]["divide_counts_by"]``; the config itself when that is 1."""
    factor = config["rehearsal"]["divide_counts_by"]
    if factor == 1:
        return dict(config)
    scaled = copy.deepcopy(dict(config))
    for dataset in scaled["datasets"].values():
        if isinstance(dataset.get("n_samples"), int):
            dataset["n_samples"] = divided(dataset["n_samples"], factor)
    for prompt_set in scaled["coupling"]["prompts"].values():
        for name in PROMPT_COUNTS:
            prompt_set[name] = divided(prompt_set[name], factor)
        prompt_set["jacobian_prompts"] = largest_valid_count(prompt_set)
    for training in scaled["training"].values():
        _divide_training(training, factor)
    synthetic = scaled["synthetic"]
    synthetic["n_samples"] = divided(synthetic["n_samples"], factor)
    synthetic["epochs"] = divided(synthetic["epochs"], factor)
    synthetic["snapshot_epoch"] = min(
        divided(synthetic["snapshot_epoch"], factor), synthetic["epochs"]
    )
    return scaled


def _divide_training(training: dict[str, Any], factor: int) -> None:
    """A training's counts divided in place: its steps stay a multiple of its epochs and
    above its warm-up; listed checkpoint steps are divided too (a count of checkpoints is
    kept). A whole-source training (``corpus: source``) has its steps and segment_steps
    divided by the factor squared: its steps are written as its whole source's tokens /
    (context × batch_size), which is hundreds of times a sampled training's, and the
    stand-in source is sized from the divided steps × batch_size, so its tokens shrink by
    the factor cubed where a sampled training's shrink by the factor squared; its steps
    stay at least its count of checkpoints, so that each is a step of its own."""
    for name in TRAINING_COUNTS:
        training[name] = divided(training[name], factor)
    if training.get("corpus") == "source":
        kept = training["checkpoints"] if isinstance(training["checkpoints"], int) else 1
        training["steps"] = max(divided(training["steps"], factor), kept)
        training["segment_steps"] = divided(training["segment_steps"], factor)
    epochs = training.get("epochs") or 1
    training["steps"] = math.ceil(training["steps"] / epochs) * epochs
    training["warmup_steps"] = min(divided(training["warmup_steps"], factor), training["steps"])
    if isinstance(training.get("checkpoints"), list):
        steps = {
            min(divided(step, factor) if step else 0, training["steps"])
            for step in training["checkpoints"]
        }
        training["checkpoints"] = sorted(steps)


def renamed_checkpoints(written: Mapping[str, Any], scaled: Mapping[str, Any]) -> dict[str, str]:
    """Each training checkpoint's model key in the ``written`` config → its key after
    ``divided_counts`` (``scaled``), the n-th checkpoint of a training to its n-th
    (``qwen-arxiv@step6000`` → ``qwen-arxiv@step6``): the names under which a rehearsal
    makes the outputs that the written config's figure index names. A training whose
    checkpoints merge when divided maps only its first ones and its last."""
    renamed = {}
    for key, training in written["training"].items():
        before = checkpoint_steps(training["checkpoints"], training["steps"])
        divided_training = scaled["training"][key]
        after = checkpoint_steps(divided_training["checkpoints"], divided_training["steps"])
        pairs = [*zip(before, after, strict=False), (before[-1], after[-1])]
        renamed |= {checkpoint_key(key, old): checkpoint_key(key, new) for old, new in pairs}
    return renamed
