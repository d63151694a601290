"""The equi-learning stage in the workflow (torch-free): its figures, its final outputs and
the check of its runs. ``layout`` and ``expanded`` are the workflow's ``Layout`` and
``ExpandedConfig`` (``layerlaws.pipeline``); the stage's job needs are
``layerlaws.equilearning.costs``."""

from __future__ import annotations

from typing import Any

from layerlaws.core.errors import require_key

EQUILEARNING_FIGURES = ("law", "norms", "fuzziness", "token_views")
"""The figures of one run (``plot_equilearning``)."""


def outputs(layout: Any, expanded: Any, plot_format: str) -> list[str]:
    """The cross-run summary tables and figure, and per run its law fits, its figures and
    (under ``hidden_states.keep``) its kept hidden states; nothing without runs."""
    if not expanded.runs:
        return []
    summary = layout.equilearning_summary()
    paths = [
        f"{summary}/summary.csv",
        f"{summary}/best_datasets.csv",
        f"{summary}/summary.{plot_format}",
    ]
    for model, dataset in expanded.runs:
        folder = layout.equilearning(model, dataset)
        paths.append(f"{folder}/law.csv")
        paths += [f"{folder}/{name}.{plot_format}" for name in EQUILEARNING_FIGURES]
        if expanded.config["hidden_states"]["keep"]:
            paths.append(layout.hidden(model, dataset))
    return paths


def check_runs(expanded: Any) -> None:
    """Every equi-learning run names a model (after expansion) and a dataset."""
    for index, (model, dataset) in enumerate(expanded.runs):
        require_key(f"runs[{index}].model", model, "models", expanded.models)
        require_key(f"runs[{index}].dataset", dataset, "datasets", expanded.config["datasets"])
