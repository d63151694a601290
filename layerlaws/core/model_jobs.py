"""The rules whose jobs run a model, as their stages declare them (``Stage.model_jobs`` of
the workflow's stages): what a job needs, how the plan of a whole config lists the
stage's jobs, and what ``snakemake estimate`` says of a job planned longer than its
partition allows. The workflow's planner plans every stage's jobs from these declarations, and
the rules' resources are read from them by rule name. Torch-free; a job's needs are a
``layerlaws.forward.costs.Needs``.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import asdict, dataclass
from typing import Any

SAVES = "it saves its progress every execution.checkpoint_minutes ({minutes:g} min) at most"
"""Where a job resumed after a kill goes on from, unless its rule says otherwise."""


@dataclass(frozen=True)
class ModelJob:
    """A rule whose jobs run a model."""

    rule: str
    needs: Callable[[Any, Any, Any], Any]
    """A job's needs, ``needs(planner, wildcards, input)`` (a ``JobPlanner``, the job's
    wildcards and named input files): called when Snakemake schedules the job or lists it in
    a dry run, before its inputs exist (sizes then come from the config) and again after."""
    shorter: str
    """How a job of the rule is planned shorter, with its plan row's ``{model}`` and
    ``{data}``."""
    resumes: str = SAVES
    """Where a job of the rule resumed after a kill goes on from (``{minutes}``:
    ``execution.checkpoint_minutes``)."""
    measures_coupling: bool = False
    """Whether its GPU-hours are the coupling's (``gpu_hours_line``)."""


def plan_row(
    rule: str,
    model: str,
    data: str,
    sized: tuple[Any, str],
    tokens: int,
    tokens_known: str,
    needs: Any,
    *,
    wildcards: Mapping[str, Any],
    cache_bytes_float32: int = 0,
    **extra: Any,
) -> dict[str, Any]:
    """One row of a config's plan (``JobPlanner.plan``): a job of ``rule`` on ``model`` and
    ``data`` (a dataset, a prompt set, a shard of one), the model's size and where it was
    read from (``sized``: a ``ModelSize`` and a word), the ``tokens`` it reads (prompts
    where ``tokens_known`` is "prompts") and what it ``needs``; beside them the Snakemake
    job's ``wildcards`` (as texts: the job a dry run lists), the bytes a float32 cache of
    every layer's states for those tokens would take, and ``extra`` columns (a training's
    ``chain``)."""
    size, sized_by = sized
    return {
        "job": rule,
        "model": model,
        "data": data,
        "wildcards": {name: str(value) for name, value in wildcards.items()},
        "parameters": size.parameters,
        "sized_by": sized_by,
        "tokens": tokens,
        "tokens_known": tokens_known,
        "cache_bytes_float32": cache_bytes_float32,
        **extra,
        **asdict(needs),
    }
