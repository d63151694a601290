"""The stages of the workflow, in the order they run: what the workflow knows of each is
its module ``layerlaws.<stage>.workflow`` (its figures, final outputs and config checks).
``rule all`` asks for every stage's final outputs (``Targets.final_outputs``), and an
expanded config passes every stage's checks (``ExpandedConfig.from_config``).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from layerlaws.coupling import workflow as coupling
from layerlaws.equilearning import workflow as equilearning
from layerlaws.series import workflow as series
from layerlaws.signatures import workflow as signatures
from layerlaws.synthetic import workflow as synthetic
from layerlaws.training import workflow as training

if TYPE_CHECKING:
    from layerlaws.pipeline.expansion import ExpandedConfig
    from layerlaws.pipeline.layout import Layout


@dataclass(frozen=True)
class Stage:
    """One stage as the workflow sees it."""

    outputs: Callable[[Layout, ExpandedConfig, str], list[str]]
    """Its final outputs under a layout, for an expanded config, figures in a format."""
    config_checks: tuple[Callable[[Mapping[str, Any]], None], ...] = ()
    """Its checks of the config as written (before expansion)."""
    expanded_checks: tuple[Callable[[ExpandedConfig], None], ...] = ()
    """Its checks of the expanded config (its runs, the expanded models)."""


STAGES = (
    Stage(training.outputs, config_checks=(training.check_trainings,)),
    Stage(
        equilearning.outputs,
        config_checks=(equilearning.check_observers,),
        expanded_checks=(equilearning.check_runs,),
    ),
    Stage(
        signatures.outputs,
        config_checks=(signatures.check_own_corpus,),
        expanded_checks=(signatures.check_signatures, signatures.check_token_groups),
    ),
    Stage(coupling.outputs, expanded_checks=(coupling.check_coupling,)),
    Stage(series.outputs, config_checks=(series.check_series,)),
    Stage(synthetic.outputs),
)
"""Every stage, in the order they run (and their outputs and checks come)."""
