"""Functions that rules give Snakemake for their inputs, params and resources, called with a
job's wildcards (and, for resources, its input files): built from the workflow's shared
objects (``layerlaws.pipeline.startup.Pipeline``), so that a rule file names what a job
reads and needs without logic of its own."""

from __future__ import annotations

import inspect
import os
from collections.abc import Callable, Iterable, Mapping
from typing import Any

from layerlaws.forward.costs import Needs
from layerlaws.models.quantization import stage_quantization
from layerlaws.pipeline.preflight import local_gpu_visible

NEEDS = ("gpu", "mem_mb", "disk_mb", "runtime")
"""The resources of a model-running job that its needs give (``Needs``)."""


def by_wildcards(function: Callable[..., Any]) -> Callable[[Any], Any]:
    """``function`` called with the job's wildcards its parameters name (a ``Targets``
    method of a model, a dataset, a prompt set…)."""
    names = list(inspect.signature(function).parameters)
    return lambda wildcards: function(*(wildcards[name] for name in names))


def model_setting(expanded: Any, key: str, default: Any = None) -> Callable[[Any], Any]:
    """The job's model's setting ``key`` (``models.<key>.<setting>``, an expanded model's
    too), ``default`` where it has none."""
    return lambda wildcards: expanded.models[wildcards.model].get(key, default)


def model_quantization(expanded: Any, stage: str) -> Callable[[Any], str]:
    """The job's model's quantisation in ``stage`` (passes or coupling)."""
    return lambda wildcards: stage_quantization(expanded.models[wildcards.model], stage)


def config_entry(
    config: Mapping[str, Any], block: str, wildcard: str, key: str | None = None
) -> Callable[[Any], Any]:
    """The entry of the config's ``block`` (datasets, training…) that the job's
    ``wildcard`` names, or its setting ``key``."""

    def entry(wildcards: Any) -> Any:
        found = config[block][wildcards[wildcard]]
        return found if key is None else found[key]

    return entry


def job_resources(
    needs: Callable[[Any, Any], Needs], partition: Callable[..., str | None]
) -> dict[str, Callable[..., Any]]:
    """The resource functions of a model-running rule from its jobs' ``needs`` (a function
    of the job's wildcards and input files, ``JobPlanner.needs``): GPUs, host memory, disk
    and runtime, evaluated when the job's inputs exist, and its ``slurm_partition``,
    ``partition(gpus, **job)`` of its GPU claim (``gpus``: a claim to route instead). A
    job is planned once for its wildcards and the state of its inputs (which exist, and
    when each was written), not once per resource. The CPUs of a job are its rule's threads
    (the SLURM plugin's --cpus-per-task)."""
    plans: dict[Any, Needs] = {}

    def planned(wildcards: Any, input: Any) -> Needs:
        inputs = tuple(
            (path, os.stat(path).st_mtime_ns if os.path.exists(path) else None) for path in input
        )
        key = (tuple(wildcards.items()), inputs)
        if key not in plans:
            plans[key] = needs(wildcards, input)
        return plans[key]

    def need(name: str) -> Callable[[Any, Any], int]:
        return lambda wildcards, input: getattr(planned(wildcards, input), name)

    def slurm_partition(
        wildcards, input, attempt, threads, rulename, async_run, gpus=None
    ) -> str | None:
        return partition(
            planned(wildcards, input).gpu if gpus is None else gpus,
            wildcards=wildcards,
            input=input,
            attempt=attempt,
            threads=threads,
            rulename=rulename,
            async_run=async_run,
        )

    return {**{name: need(name) for name in NEEDS}, "slurm_partition": slurm_partition}


def partition_router(gpu_partition: str | None, default: Any) -> Callable[..., str | None]:
    """The SLURM partition of a job, ``partition(gpus, **job)``: ``gpu_partition``
    (``execution.gpu_partition``) when the job claims GPUs and that is set, else the run's
    default-resources' ``slurm_partition`` (``default``: Snakemake's resource, evaluated with
    what Snakemake evaluates resources with, ``job``); None where none is set."""

    def partition(gpus: int, **job: Any) -> str | None:
        if gpus and gpu_partition:
            return gpu_partition
        return default.evaluate(**job).value

    return partition


def rule_partitions(rules: Iterable[Any], planner: Any) -> Callable[[Any], dict[str, Any]]:
    """For ``snakemake estimate``: a function of its job's wildcards giving each of the
    workflow's ``rules``' name → its ``slurm_partition`` as Snakemake resolves it
    (default-resources, the rule's own, set-resources), None where none is set; a
    model-running rule's follows the GPU claim of the jobs the ``planner`` plans (GPUs
    unless execution.device is cpu)."""

    def partitions(wildcards: Any) -> dict[str, Any]:
        planned = max((row["gpu"] for row in planner.plan()), default=0)
        job = dict(wildcards=wildcards, input=[], attempt=1, threads=1, async_run=None)
        return {
            rule.name: rule.resources.get("slurm_partition")
            .evaluate(**job, rulename=rule.name, gpus=planned)
            .value
            for rule in rules
        }

    return partitions


RERUN_NOTHING = ("gpus", "compile")
"""``training.<key>`` settings that change no weight (how many processes run a job, whether
its steps are compiled), so they are no param: changing one reruns nothing."""


def training_settings(config: Mapping[str, Any]) -> Callable[[Any], dict[str, Any]]:
    """The job's ``training.<key>`` block less its ``RERUN_NOTHING`` settings."""
    return lambda wildcards: {
        key: value
        for key, value in config["training"][wildcards.training].items()
        if key not in RERUN_NOTHING
    }


def training_gpus(resources: Any, device: str, jobs_run_here: bool) -> int:
    """The GPUs a training of ``gpus: auto`` may spread each job over (``JobPlanner``): the
    run's ``--resources gpu=`` (``given_gpus``), but 1 where its jobs run on a CPU
    (``device`` cpu, or auto where the jobs run on this machine and it shows no GPU)."""
    if device == "cpu" or (device == "auto" and jobs_run_here and not local_gpu_visible()):
        return 1
    return given_gpus(resources)


def given_gpus(resources: Any) -> int:
    """The GPUs of ``--resources gpu=N`` (Snakemake's ``resources`` given to the run; 1 when
    none is given), for ``snakemake estimate``'s wall time."""
    value = resources.get("gpu") if hasattr(resources, "get") else None
    return int(getattr(value, "value", value) or 1)
