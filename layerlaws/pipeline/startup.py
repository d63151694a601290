"""What the workflow builds once, when Snakemake parses it (``rules/common.smk``): the
config's problems said before anything runs, then from the validated config the shared
objects every rule file reads (``Pipeline``). Snakemake's own parts (its validation, which
fills in the schema's defaults, its errors and its view of the executor) stay in the rule
file."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from layerlaws.core.config_errors import file_problems, schema_problems
from layerlaws.core.settings import config_schema
from layerlaws.pipeline.execution import Execution
from layerlaws.pipeline.expansion import ExpandedConfig
from layerlaws.pipeline.layout import Layout
from layerlaws.pipeline.planning import JobPlanner
from layerlaws.pipeline.renamed_keys import renamed_key_errors
from layerlaws.pipeline.targets import Targets, alternatives
from layerlaws.synthetic.tasks import TASKS as ADDITION_TASKS

REPOSITORY = Path(__file__).parents[2]
"""The repository's folder (the workflow's Snakefile, its configs)."""


def config_problems(config_files: Iterable[str], config: Mapping[str, Any]) -> list[str]:
    """What is wrong with the config, a line each: its files' YAML (keys given twice,
    words read as booleans), else the keys it still uses under an old name, else its
    values against the schema."""
    problems = [problem for path in config_files for problem in file_problems(path)]
    return problems or renamed_key_errors(config) or schema_problems(config)


def hub_files_location(config: Mapping[str, Any]) -> str | None:
    """The config's ``hub_files`` as a path that reads wherever the workflow runs (any
    ``--directory``, a config file copied elsewhere): a relative one is relative to the
    repository (``REPOSITORY``), where the paper config's record lies."""
    path = config.get("hub_files")
    return path if not path or Path(path).is_absolute() else str(REPOSITORY / path)


def wildcard_patterns(config: Mapping[str, Any]) -> dict[str, str]:
    """The pattern of each wildcard: a key as the schema allows it; a model's also one
    expanded from a revision or a training checkpoint (``<key>@<name>``); a corpus a
    dataset's key; a pool's, a pool's; a task one of the addition tasks."""
    key = config_schema()["$defs"]["key"]["pattern"].strip("^$")
    return {
        "model": f"{key}(@{key})?",
        "key": key,
        "dataset": alternatives(config["datasets"]),
        "pool": alternatives(config["signatures"]["pools"]),
        "task": "|".join(ADDITION_TASKS),
    }


def model_threads(cores: int | None, jobs_go_elsewhere: bool) -> int:
    """Threads of the jobs that run a model (passes, hidden states, coupling, training):
    half the ``cores`` Snakemake is given (8 when none), 1 to 4, so that on a 2-core
    machine two such jobs run side by side (small models gain little from a second
    thread; the numbers do not depend on it) and on a workstation each gets 4. When the
    jobs go to a cluster (or this is one of its jobs), 4: the CPUs a job asks the scheduler
    for, whatever --cores the submitting run was given."""
    return 4 if jobs_go_elsewhere else min(4, max(1, (cores or 8) // 2))


@dataclass(frozen=True)
class Pipeline:
    """The shared objects of one workflow, built from its validated config."""

    layout: Layout
    expanded: ExpandedConfig
    """Revisions and training checkpoints as models, series as runs: one model per measured
    set of weights."""
    execution: Execution
    planner: JobPlanner
    targets: Targets

    @classmethod
    def start(cls, config: Mapping[str, Any], training_gpus: int = 1) -> Pipeline:
        """The objects of a validated ``config``, planning the trainings of ``gpus: auto``
        over ``training_gpus`` (``JobPlanner``); a LayerlawsError on a key that names
        nothing the config defines (``ExpandedConfig.from_config``)."""
        layout = Layout()
        expanded = ExpandedConfig.from_config(config, layout)
        return cls(
            layout=layout,
            expanded=expanded,
            execution=Execution.from_config(config),
            planner=JobPlanner(expanded, layout, training_gpus),
            targets=Targets(expanded, layout, config["plots"]["format"]),
        )
