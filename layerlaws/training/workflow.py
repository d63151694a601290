"""The training stage in the workflow (torch-free): its final outputs and the checks of its
config block. ``layout`` and ``expanded`` are the workflow's ``Layout`` and
``ExpandedConfig`` (``layerlaws.pipeline``)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from layerlaws.core.errors import LayerlawsError, require_key
from layerlaws.training.parallel import check_node, check_split

PATHS = {
    "training": "training/{training}",
    "training_counts": "training/{training}/counts",
    "checkpoints": "training/{training}/checkpoints",
    "checkpoint_manifest": "training/{training}/checkpoints.csv",
    "step_record": "training/{training}/reached/step{step}.json",
}
"""The stage's paths under the results folder (``Layout``): a training's curve, manifest,
summary and figure; the token shards and counts of the sequences it read (its checkpoints'
signatures on their own corpus); where it writes its checkpoints (not declared as outputs:
a resumed training finds them there); the table of its checkpoints (it exists once they all
do); and the record a segment writes once the training reached ``step`` (a checkpoint's
exists once its weights do)."""


def outputs(layout: Any, expanded: Any, plot_format: str) -> list[str]:
    """Each training's loss-curve figure and checkpoint table."""
    return [
        path
        for training in expanded.config["training"]
        for path in (
            f"{layout.training(training)}/curve.{plot_format}",
            layout.checkpoint_manifest(training),
        )
    ]


def check_trainings(config: Mapping[str, Any]) -> None:
    """Each training names a model (its tokenizer) and datasets, has whole epochs, a
    token budget of one sequence at least, and a batch that splits over its gpus on one
    node."""
    for key, training in config["training"].items():
        for field, table in (
            ("tokenizer", "models"),
            ("dataset", "datasets"),
            ("held_out", "datasets"),
        ):
            if training[field] is not None:
                require_key(f"training.{key}.{field}", training[field], table, config[table])
        epochs = training.get("epochs")
        if epochs is not None and training["steps"] % epochs:
            raise LayerlawsError(
                f"config training.{key}.epochs is {epochs}, and steps ({training['steps']}) is "
                f"not a multiple of it: each epoch must be whole steps; make steps a multiple "
                f"of epochs"
            )
        gpus = training.get("gpus", "auto")
        if gpus != "auto":
            check_split(training["batch_size"], gpus, key)
            check_node(gpus, config["execution"]["gpus_per_node"], key)
        budget = training.get("token_budget")
        if budget is not None and budget < training["context"]:
            raise LayerlawsError(
                f"config training.{key}.token_budget is {budget}, less than one sequence of "
                f"context {training['context']} tokens; raise it"
            )
