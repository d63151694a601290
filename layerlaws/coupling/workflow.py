"""The coupling stage in the workflow (torch-free): its figures, its final outputs and the
checks of its prompt sets and runs. ``layout`` and ``expanded`` are the workflow's
``Layout`` and ``ExpandedConfig`` (``layerlaws.pipeline``); the stage's job needs are
``layerlaws.coupling.costs``."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from layerlaws.core.errors import LayerlawsError, require_key
from layerlaws.coupling.subset import subset_problem
from layerlaws.text.corpus import prompt_datasets

PATHS = {
    "coupling": "coupling/{model}/{prompts}",
    "coupling_shards": "coupling/{model}/{prompts}/shards",
    "coupling_shard": "coupling/{model}/{prompts}/shards/{shard}.pt",
    "trajectories": "coupling/{model}/{prompts}/trajectories",
}
"""The stage's paths under the results folder (``Layout``): a model's block coupling on a
prompt set and its figures; its shards' measurements (``coupling.shards``) and one
shard's; its hidden trajectories and their figures."""

MEASURED = {
    "depth": "depth.csv",
    "singular_values": "singular_values.csv",
    "tokens": "tokens.csv",
    "token_means": "token_means.csv",
    "factors": "factors.npz",
    "couplings": "couplings.npz",
    "trajectories": "trajectories/tokens.csv",
    "layers": "trajectories/layers.csv",
    "streams": "trajectories/streams.npz",
    "prompts": "prompts.csv",
}
"""The outputs of ``measure_coupling``, by name (``layerlaws.coupling.prompt_set``'s
tables and arrays, and the prompts), under a coupling run's folder."""
COUPLING_FIGURES = (
    "depth",
    "tokens",
    "adjacency",
    "singular_values",
    "depth_grid",
    "token_grid",
    "adjacency_graph",
)
"""The coupling figures of one model on one prompt set (``plot_coupling``)."""
TRAJECTORY_FIGURES = ("shape", "pca", "layers")
"""The trajectory figures of one model on one prompt set (``plot_coupling``)."""
PER_PROMPT_TABLES = ("prompt_coupling", "datasets")
"""The per-prompt and per-dataset coupling of one model on one prompt set
(``summarize_coupling``, ``layerlaws.coupling.per_prompt``)."""
PER_PROMPT_FIGURES = ("prompt_length",)
"""Its figure: coupling against prompt length (Aubry et al., Fig. 10, right)."""


def per_prompt_outputs(coupling: str, plot_format: str) -> list[str]:
    """The outputs of ``summarize_coupling`` in the folder ``coupling`` of a coupling run."""
    return [f"{coupling}/{name}.csv" for name in PER_PROMPT_TABLES] + [
        f"{coupling}/{name}.{plot_format}" for name in PER_PROMPT_FIGURES
    ]


def outputs(layout: Any, expanded: Any, plot_format: str) -> list[str]:
    """Per coupling run its coupling and trajectory figures, and for a prompt set drawn
    from several datasets its per-prompt and per-dataset coupling."""
    paths = []
    for model, prompts in expanded.coupling_runs:
        coupling = layout.coupling(model, prompts)
        trajectories = layout.trajectories(model, prompts)
        paths += [f"{coupling}/{name}.{plot_format}" for name in COUPLING_FIGURES]
        paths += [f"{trajectories}/{name}.{plot_format}" for name in TRAJECTORY_FIGURES]
        if len(prompt_datasets(expanded.prompt_sets[prompts])) > 1:
            paths += per_prompt_outputs(coupling, plot_format)
    return paths


def check_coupling(expanded: Any) -> None:
    """Prompt sets name datasets and a Jacobian subset they can draw
    (``layerlaws.coupling.subset``); coupling runs name a model (after expansion) and a
    prompt set."""
    datasets = expanded.config["datasets"]
    prompt_sets = expanded.prompt_sets
    for name, prompts in prompt_sets.items():
        for dataset in prompt_datasets(prompts):
            require_key(f"coupling.prompts.{name}.dataset", dataset, "datasets", datasets)
        problem = subset_problem(name, prompts)
        if problem is not None:
            raise LayerlawsError(f"config {problem}")
    for index, (model, prompts) in enumerate(expanded.coupling_runs):
        require_key(f"coupling.runs[{index}].model", model, "models", expanded.models)
        require_key(f"coupling.runs[{index}].prompts", prompts, "coupling.prompts", prompt_sets)


def ks_beyond(ks: Sequence[int], hidden_size: int) -> str | None:
    """What is wrong with ``coupling.ks`` for a model of hidden size d, or None: a
    Jacobian of the residual stream has d singular vectors, so every K must be ≤ d."""
    if max(ks) <= hidden_size:
        return None
    return (
        f"coupling.ks holds K = {max(ks)}, more singular vectors than the model's hidden size "
        f"{hidden_size}; choose every K ≤ {hidden_size}"
    )
