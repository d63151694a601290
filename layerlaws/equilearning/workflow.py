"""The equi-learning stage in the workflow (torch-free): its figures, its final outputs, the
named observers of a run (``equilearning.observers``) as rule params and inputs, and the
checks of its runs and observers. ``layout`` and ``expanded`` are the workflow's
``Layout`` and ``ExpandedConfig`` (``layerlaws.pipeline``); the stage's job needs are
``layerlaws.equilearning.costs``."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from layerlaws.core.errors import LayerlawsError, require_key
from layerlaws.equilearning.settings import observer_specs

PATHS = {
    "equilearning": "equilearning/{model}/{dataset}",
    "equilearning_shards": "equilearning/{model}/{dataset}/shards",
    "equilearning_shard": "equilearning/{model}/{dataset}/shards/{shard}.pt",
    "equilearning_observers": "equilearning/{model}/{dataset}/observers",
    "evaluation": "evaluation/{model}/{dataset}.csv",
    "equilearning_summary": "equilearning",
}
"""The stage's paths under the results folder (``Layout``): a run's PR table, law fits,
token views and figures; its shards' observers (``equilearning.shards``) and one shard's;
its named observers' tables, ``<name>.csv`` (``equilearning.observers``); its evaluation
table (loss and accuracy of the probing task); the cross-run summary tables and figure."""

EQUILEARNING_FIGURES = ("law", "norms", "fuzziness", "token_views")
"""The figures of one run (``plot_equilearning``)."""
GEOMETRY = "geometry"
"""The built-in geometry observer's name: its runs have the figure ``geometry``."""


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
        if measures_geometry(expanded.config, model):
            paths.append(f"{folder}/{GEOMETRY}.{plot_format}")
        if expanded.hidden_states["keep"]:
            paths.append(layout.hidden(model, dataset))
    return paths


def check_runs(expanded: Any) -> None:
    """Every equi-learning run names a model (after expansion) and a dataset."""
    for index, (model, dataset) in enumerate(expanded.runs):
        require_key(f"runs[{index}].model", model, "models", expanded.models)
        require_key(f"runs[{index}].dataset", dataset, "datasets", expanded.config["datasets"])


def measures_geometry(config: Mapping[str, Any], model: str) -> bool:
    """Whether the runs of ``model`` measure the built-in geometry."""
    return any(spec.name == GEOMETRY for spec in observer_specs(config["equilearning"], model))


def observer_params(config: Mapping[str, Any], model: str) -> list[dict[str, Any]]:
    """The ``observers`` param of ``model``'s passes: its named observers' names, classes
    and settings (so that changing one reruns the passes it measures)."""
    return [spec.params() for spec in observer_specs(config["equilearning"], model)]


def observer_sources(config: Mapping[str, Any], model: str) -> list[str]:
    """The files defining the plug-in observers of ``model``'s passes (inputs of the pass:
    editing one reruns it); a built-in's are the package's, like every other stage's."""
    specs = observer_specs(config["equilearning"], model)
    return [found for spec in specs if spec.declared is None and (found := spec.source_file())]


def check_observers(config: Mapping[str, Any]) -> None:
    """Every named observer can be built: its class imports and has an observer's methods,
    its settings are accepted, and its ``models`` name models or trainings of the config."""
    defined = {*config["models"], *config.get("training", {})}
    for index, entry in enumerate(config["equilearning"].get("observers", ())):
        for model in entry.get("models", ()) if isinstance(entry, Mapping) else ():
            if model not in defined:
                raise LayerlawsError(
                    f"equilearning.observers[{index}].models: {model!r} is no key of models "
                    f"or training"
                )
    for spec in observer_specs(config["equilearning"]):
        spec.typed_settings()
