"""The stages of the workflow, in the order they run. A stage is one rule file,
``rules/<name>.smk`` (which the Snakefile includes from ``STAGES``, and whose opening comment
says what the stage does); what the workflow knows of a stage with outputs of its own is its
module ``layerlaws.<stage>.workflow`` (its figures, final outputs and config checks)
and, for a stage that runs models, ``layerlaws.<stage>.scheduling`` (its model-running
rules and what their jobs need). ``rule all`` asks for every stage's final outputs
(``Targets.final_outputs``), an expanded config passes every stage's checks
(``ExpandedConfig.from_config``), and the planner plans every stage's model jobs
(``JobPlanner``).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from layerlaws.core.model_jobs import ModelJob
from layerlaws.coupling import scheduling as coupling_jobs
from layerlaws.coupling import workflow as coupling
from layerlaws.equilearning import scheduling as equilearning_jobs
from layerlaws.equilearning import workflow as equilearning
from layerlaws.series import workflow as series
from layerlaws.signatures import workflow as signatures
from layerlaws.synthetic import workflow as synthetic
from layerlaws.training import scheduling as training_jobs
from layerlaws.training import workflow as training

if TYPE_CHECKING:
    from layerlaws.pipeline.expansion import ExpandedConfig
    from layerlaws.pipeline.layout import Layout
    from layerlaws.pipeline.planning import JobPlanner


def _no_jobs(_planner: JobPlanner) -> list[dict[str, Any]]:
    return []


def _no_outputs(_layout: Layout, _expanded: ExpandedConfig, _plot_format: str) -> list[str]:
    return []


@dataclass(frozen=True)
class Stage:
    """One stage as the workflow sees it."""

    name: str
    """Its rule file is ``rules/<name>.smk``."""
    outputs: Callable[[Layout, ExpandedConfig, str], list[str]] = _no_outputs
    """Its final outputs under a layout, for an expanded config, figures in a format (none
    for a stage whose outputs only later stages read)."""
    paths: Mapping[str, str] = field(default_factory=dict)
    """Its folders and files under the results folder, by name: patterns whose wildcards
    (``{model}``, ``{dataset}``…) a ``Layout`` method of that name fills
    (``layerlaws.pipeline.layout``)."""
    config_checks: tuple[Callable[[Mapping[str, Any]], None], ...] = ()
    """Its checks of the config as written (before expansion)."""
    expanded_checks: tuple[Callable[[ExpandedConfig], None], ...] = ()
    """Its checks of the expanded config (its runs, the expanded models)."""
    model_jobs: tuple[ModelJob, ...] = ()
    """Its rules whose jobs run a model, with what a job needs."""
    planned_jobs: Callable[[JobPlanner], list[dict[str, Any]]] = _no_jobs
    """The rows of its model jobs in the plan of a whole config (``JobPlanner.plan``)."""


STAGES = (
    Stage(
        "training",
        training.outputs,
        paths=training.PATHS,
        config_checks=(training.check_trainings,),
        model_jobs=training_jobs.MODEL_JOBS,
        planned_jobs=training_jobs.planned_jobs,
    ),
    Stage("corpus"),
    Stage("models"),
    Stage("tokens"),
    Stage("hidden"),
    Stage(
        "equilearning",
        equilearning.outputs,
        paths=equilearning.PATHS,
        config_checks=(equilearning.check_observers,),
        expanded_checks=(equilearning.check_runs,),
        model_jobs=equilearning_jobs.MODEL_JOBS,
        planned_jobs=equilearning_jobs.planned_jobs,
    ),
    Stage(
        "signatures",
        signatures.outputs,
        paths=signatures.PATHS,
        config_checks=(signatures.check_own_corpus,),
        expanded_checks=(signatures.check_signatures, signatures.check_token_groups),
    ),
    Stage(
        "coupling",
        coupling.outputs,
        paths=coupling.PATHS,
        expanded_checks=(coupling.check_coupling,),
        model_jobs=coupling_jobs.MODEL_JOBS,
        planned_jobs=coupling_jobs.planned_jobs,
    ),
    Stage("series", series.outputs, paths=series.PATHS, config_checks=(series.check_series,)),
    Stage("synthetic", synthetic.outputs, paths=synthetic.PATHS),
)
"""Every stage, in the order they run (and their rule files are included, their outputs and
checks come)."""
RULE_FILES = tuple(f"rules/{stage.name}.smk" for stage in STAGES)
"""The stages' rule files, relative to the repository, in order."""
