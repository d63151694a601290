"""The model jobs of the coupling stage, as the workflow schedules them: a coupling run's
job (``measure_coupling``) and its shards' (``measure_coupling_shard``, with
``coupling.shards`` above 1). Their needs apply ``layerlaws.coupling.costs`` to a run;
``planner`` is the workflow's ``JobPlanner`` (``layerlaws.pipeline.planning``), which sizes
models."""

from __future__ import annotations

from typing import Any

from layerlaws.core.model_jobs import ModelJob, plan_row
from layerlaws.coupling.costs import coupling_merge_needs, coupling_needs
from layerlaws.forward.costs import ModelSize, Needs
from layerlaws.models.quantization import stage_quantization
from layerlaws.text.corpus import prompt_count


def job_needs(planner: Any, model: str, size: ModelSize, prompts: str) -> Needs:
    """Needs of a coupling job of ``model`` on the prompt set ``prompts``
    (``coupling_needs``), or of one of its shards' jobs."""
    entry = planner.model(model)
    return coupling_needs(
        size=size,
        settings=planner.config["coupling"],
        prompt_set=planner.expanded.prompt_sets[prompts],
        shards=planner.expanded.coupling_sharding.shards,
        dtype=entry["dtype"],
        quantization=stage_quantization(entry, "coupling"),
        on_gpu=planner.on_gpu(),
        gpus=entry["gpus"],
        gpu_memory_gb=planner.execution.gpu_memory_gb,
        step_zero=planner.expanded.step_zero_model(model) is not None,
    )


def _shard_needs(planner: Any, wildcards: Any, input: Any) -> Needs:
    size = planner.known_size(wildcards.model, input.model)
    if size is None:
        return planner.placeholder(wildcards.model)
    return job_needs(planner, wildcards.model, size, wildcards.prompts)


def _coupling_job_needs(planner: Any, wildcards: Any, input: Any) -> Needs:
    """The whole coupling job, or (with shards) the merge of its shards: on the CPU, a
    prompt at a time (``coupling_merge_needs``)."""
    if not planner.expanded.coupling_sharding.split:
        return _shard_needs(planner, wildcards, input)
    size = planner.known_size(wildcards.model, input.model)
    if size is None:
        return planner.placeholder(wildcards.model)
    return coupling_merge_needs(
        size=size,
        settings=planner.config["coupling"],
        prompt_set=planner.expanded.prompt_sets[wildcards.prompts],
    )


FEWER_PROMPTS = "fewer prompts (coupling.prompts.{data}) or coupling.token_layers"
MODEL_JOBS = (
    ModelJob("measure_coupling", _coupling_job_needs, FEWER_PROMPTS, measures_coupling=True),
    ModelJob(
        "measure_coupling_shard",
        _shard_needs,
        FEWER_PROMPTS + " or more coupling.shards",
        measures_coupling=True,
    ),
)
"""The stage's model-running rules."""


def planned_jobs(planner: Any) -> list[dict[str, Any]]:
    """The plan's rows of every coupling run: its job, or its shards' jobs."""
    rows = []
    sharding = planner.expanded.coupling_sharding
    for model, prompts in planner.expanded.coupling_runs:
        sized = planner.size(model)
        needs = job_needs(planner, model, sized[0], prompts)
        count = sharding.share(prompt_count(planner.expanded.prompt_sets[prompts]))
        for rule, data, shard in sharding.jobs("measure_coupling", prompts):
            wildcards = {"model": model, "prompts": prompts, **shard}
            rows.append(
                plan_row(rule, model, data, sized, count, "prompts", needs, wildcards=wildcards)
            )
    return rows
