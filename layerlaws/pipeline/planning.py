"""The needs of every model-running job of an expanded config, as the stages declare their
jobs (``Stage.model_jobs`` and ``Stage.planned_jobs``, ``layerlaws.pipeline.stages``; each
stage's ``scheduling`` module applies its cost model over ``layerlaws.forward.costs``): as
Snakemake resources when a job is scheduled (its prepared model and tokens exist then),
and as a plan for the whole config before anything runs.

A model's size comes from its prepared facts when they exist, else from its
``models.<key>.size`` entry, else from its config (read without weights: a local folder,
a GGUF file, or the hub). Before tokenisation a run's tokens are bounded by its dataset's
``n_samples`` × ``max_tokens`` (or its ``token_budget``).
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

import polars as pl

from layerlaws.core.errors import LayerlawsError
from layerlaws.core.model_jobs import ModelJob
from layerlaws.forward.batching import CPU_BATCH_SIZE
from layerlaws.forward.costs import HOST_BASE_MB, ModelSize, Needs
from layerlaws.models.metadata import MODEL_METADATA
from layerlaws.pipeline.execution import Execution
from layerlaws.pipeline.expansion import ExpandedConfig
from layerlaws.pipeline.layout import Layout
from layerlaws.pipeline.stages import STAGES
from layerlaws.training.plan import TrainingSpec, parameter_count

MODEL_JOBS: dict[str, ModelJob] = {job.rule: job for stage in STAGES for job in stage.model_jobs}
"""Every stage's model-running rules, by rule name."""
COUPLING_RULES = frozenset(rule for rule, job in MODEL_JOBS.items() if job.measures_coupling)
"""The rules whose jobs measure coupling: counted apart in ``gpu_hours_line``."""
ASSUMED_TEXTS = 10_000
"""Texts planned for a dataset of ``n_samples: all`` before it is sampled."""


def prepared_size(folder: str | Path) -> ModelSize:
    """The size of a prepared model, from its facts file."""
    return ModelSize.of(json.loads((Path(folder) / MODEL_METADATA).read_text()))


def token_table_size(path: str | Path) -> tuple[int, int]:
    """(tokens, longest sequence) of a tokens table."""
    lengths = pl.scan_parquet(path).group_by("sentence_id").len().collect()["len"]
    return int(lengths.sum()), int(lengths.max())


def config_size(model_config: Mapping[str, Any]) -> ModelSize:
    """The size of a configured model from its config alone (no weights are read)."""
    from layerlaws.models.architectures import blocks_of, stack_sizes
    from layerlaws.models.preparation import skeleton_of, source_config

    skeleton = skeleton_of(
        source_config(model_config), model_config.get("trust_remote_code", False)
    )
    embeddings = skeleton.get_input_embeddings().weight
    return ModelSize(
        sum(parameter.numel() for parameter in skeleton.parameters()),
        len(blocks_of(skeleton)),
        int(embeddings.shape[1]),
        int(embeddings.shape[0]),
        skeleton.config.model_type,
        *stack_sizes(skeleton),
    )


class JobPlanner:
    """Needs of the model-running jobs of one expanded config, whose files lie where
    ``layout`` puts them: what the stages' job declarations (``MODEL_JOBS``) read of a
    model's size, a run's tokens and the execution settings. ``training_gpus``: the GPUs a
    training of ``gpus: auto`` may spread its jobs over (``rule_functions.training_gpus``:
    the run's ``--resources gpu=``)."""

    def __init__(
        self, expanded: ExpandedConfig, layout: Layout | None = None, training_gpus: int = 1
    ) -> None:
        self.expanded = expanded
        self.config = expanded.config
        self.layout = layout or Layout()
        self.execution = Execution.from_config(self.config)
        self.training_gpus = training_gpus

    @classmethod
    def from_config(
        cls, config: Mapping[str, Any], layout: Layout | None = None, training_gpus: int = 1
    ) -> JobPlanner:
        """The planner of a validated config (expanded and checked here)."""
        return cls(ExpandedConfig.from_config(config, layout), layout, training_gpus)

    def model(self, key: str) -> Mapping[str, Any]:
        """A measured model's entry (expanded: a revision's or a checkpoint's too)."""
        return self.expanded.models[key]

    def batch_tokens(self, longest: int) -> int:
        """The tokens of a batch of texts of at most ``longest`` tokens."""
        batch = self.execution.batch_size
        return (CPU_BATCH_SIZE if batch == "auto" else int(batch)) * longest

    def on_gpu(self) -> bool:
        """Whether the model jobs claim GPUs (``execution.device`` other than cpu)."""
        return self.execution.device != "cpu"

    # What a job needs, called with the job's wildcards and input files. Snakemake may ask
    # before the inputs exist (to print a dry run); then the size is the config's ``size``
    # entry and the tokens the dataset's bound, and it asks again once they exist.

    def needs(self, rule: str) -> Callable[[Any, Any], Needs]:
        """What a job of the model-running ``rule`` needs, as a function of its wildcards
        and input files (``MODEL_JOBS``)."""
        if rule not in MODEL_JOBS:
            raise LayerlawsError(
                f"rule {rule} asks for the needs of a model job, but no stage declares it: "
                f"add a ModelJob for it to its stage's MODEL_JOBS (<stage>/scheduling.py) and "
                f"the stage's model_jobs in layerlaws/pipeline/stages.py"
            )
        job = MODEL_JOBS[rule]
        return lambda wildcards, input: job.needs(self, wildcards, input)

    def known_size(self, model: str, folder: str | Path) -> ModelSize | None:
        """A model's size from its prepared folder's facts once they exist, else from its
        ``models.<key>.size``; else None."""
        if (Path(folder) / MODEL_METADATA).is_file():
            return prepared_size(folder)
        return ModelSize.of(self.model(model)["size"]) if "size" in self.model(model) else None

    def known_tokens(self, dataset: str, path: str | Path) -> tuple[int, int]:
        """(tokens, longest sequence) of a tokens table once it exists, else the dataset's
        bound."""
        return token_table_size(path) if Path(path).is_file() else self.token_bound(dataset)

    def placeholder(self, model: str) -> Needs:
        """What a job of ``model`` claims while its size is unknown (a dry run before the
        model is prepared): its GPUs, the base host memory."""
        gpus = self.model(model)["gpus"]
        return Needs(int(gpus) if gpus != "auto" else 1, 0, HOST_BASE_MB, 1, 10)

    def run_needs(self, wildcards: Any, input: Any, job: Callable[..., Needs]) -> Needs:
        """``job(model, size, tokens, longest)`` for a model × dataset run."""
        size = self.known_size(wildcards.model, input.model)
        if size is None:
            return self.placeholder(wildcards.model)
        return job(wildcards.model, size, *self.known_tokens(wildcards.dataset, input.tokens))

    @staticmethod
    def merge_needs(held_mb: int, disk_mb: int) -> Needs:
        """A job on the CPU that merges a sharded job's outputs, holding ``held_mb`` of them
        in host memory and writing ``disk_mb``."""
        return Needs(0, 0, HOST_BASE_MB + held_mb, disk_mb, 10)

    # A plan of the whole config, before anything runs.

    def recorded_size(self, model: str) -> tuple[ModelSize, str] | None:
        """A model's size where it is written down: its prepared facts, else its
        ``models.<key>.size``; None otherwise."""
        prepared = Path(self.layout.model(model))
        if (prepared / MODEL_METADATA).is_file():
            return prepared_size(prepared), "prepared model"
        if "size" in self.model(model):
            return ModelSize.of(self.model(model)["size"]), "config size"
        return None

    def size(self, model: str) -> tuple[ModelSize, str]:
        """A model's size and where it was read from."""
        recorded = self.recorded_size(model)
        if recorded is not None:
            return recorded
        training = self.model(model)["source"].get("training")
        if training is not None:
            return self.trained_size(training), "training settings"
        try:
            return config_size(self.model(model)), "model config"
        except LayerlawsError as error:
            raise LayerlawsError(
                f"cannot size model {model!r} before it is prepared: {error}. Give its size in "
                f"the config (models.{model}.size: parameters, num_layers, hidden_size, "
                f"vocab_size) to plan offline"
            ) from error

    def known_shape(self, model: str) -> tuple[int, int, str] | None:
        """A model's depth L, hidden size d and where they were read from, where they are
        known without reading the model's own config (which needs torch, and may need the
        hub): its prepared facts, its ``models.<key>.size``, or its training's settings;
        else None."""
        recorded = self.recorded_size(model)
        if recorded is not None:
            size, read_from = recorded
            return size.num_layers, size.hidden_size, read_from
        training = self.model(model)["source"].get("training")
        if training is not None:
            spec = TrainingSpec.of(self.config["training"][training])
            return spec.num_layers, spec.hidden_size, "training settings"
        return None

    def trained_size(self, training: str) -> ModelSize:
        """The size of a training's checkpoints, from its settings and its tokenizer
        model's vocabulary."""
        settings = self.config["training"][training]
        spec = TrainingSpec.of(settings)
        vocab_size = self.size(settings["tokenizer"])[0].vocab_size
        return ModelSize(
            parameter_count(spec, vocab_size), spec.num_layers, spec.hidden_size, vocab_size
        )

    def token_bound(self, dataset: str) -> tuple[int, int]:
        """(most tokens, longest sequence) of a dataset before it is tokenised (a dataset of
        ``n_samples: all`` is assumed to hold ASSUMED_TEXTS texts)."""
        settings = self.config["datasets"][dataset]
        longest = settings["max_tokens"]
        texts = ASSUMED_TEXTS if settings["n_samples"] == "all" else settings["n_samples"]
        return settings["token_budget"] or texts * longest, longest

    def tokens(self, model: str, dataset: str) -> tuple[int, int, str]:
        """(tokens, longest sequence, how they are known) of a run."""
        path = Path(self.layout.tokens(model, dataset))
        if path.is_file():
            return (*token_table_size(path), "tokenised")
        return (*self.token_bound(dataset), "at most")

    def plan(self) -> list[dict[str, Any]]:
        """One row per model-running job of the config, stage by stage
        (``Stage.planned_jobs``): what it runs on and needs (a training's segments, each
        going on from the one before, with their ``chain``: the training)."""
        return [row for stage in STAGES for row in stage.planned_jobs(self)]


def plan_table(rows: list[dict[str, Any]]) -> str:
    """The plan as a text table, with totals: every job's GPUs × memory, host memory, disk
    of its outputs (with what it removes when it ends) and runtime, and beside them what a
    float32 cache of every layer's states (the pipeline's layout before statistics were
    streamed) would take."""
    lines = [
        f"{'job':18s} {'model':26s} {'data':14s} {'params':>8s} {'tokens':>12s} "
        f"{'GPUs x GiB':>11s} {'host GiB':>9s} {'outputs':>9s} {'minutes':>8s} "
        f"{'f32 cache':>10s}"
    ]
    for row in rows:
        gpus = f"{row['gpu']} x {row['gpu_mb'] / 1024:.1f}" if row["gpu"] else "cpu"
        tokens = f"{row['tokens_known'].replace('at most', '<=')} {row['tokens']:,}".strip()
        if row["tokens_known"] == "prompts":
            tokens = f"{row['tokens']:,} prompts"
        lines.append(
            f"{row['job']:18s} {row['model']:26s} {row['data']:14s} "
            f"{row['parameters'] / 1e9:7.2f}B {tokens:>12s} {gpus:>11s} "
            f"{row['mem_mb'] / 1024:9.1f} {_size(_outputs_mb(row) * 2**20):>9s} "
            f"{row['runtime']:8d} {_size(row['cache_bytes_float32']):>10s}"
        )
    outputs = sum(_outputs_mb(row) for row in rows) * 2**20
    scratch = max((row["scratch_mb"] for row in rows), default=0) * 2**20
    cache = sum(row["cache_bytes_float32"] for row in rows)
    lines.append(
        f"total outputs of these jobs: {_size(outputs)} (each job's disk at its largest: a "
        "coupling job's prompt files beside its outputs until it ends; not counted: the "
        "packed training corpora, token tables and hub downloads, docs/gpus-and-clusters.md"
        f"#what-takes-the-disk); scratch disk while a job runs: {_size(scratch)} at most; a "
        "float32 cache of every layer's "
        f"states would take {_size(cache)}; models sized by: "
        + ", ".join(sorted({f"{row['model']}: {row['sized_by']}" for row in rows}))
    )
    return "\n".join(lines)


def _outputs_mb(row: dict[str, Any]) -> int:
    """Disk of a plan row's outputs, MiB: its disk claim less its scratch files."""
    return row["disk_mb"] - row["scratch_mb"]


def gpu_hours_line(rows: list[dict[str, Any]], gpus: int) -> str:
    """``gpu_hours=<all jobs> coupling_gpu_hours=<measure_coupling's> wall_hours_on=<N>:<h>``:
    GPU-hours are each job's GPUs × its planned runtime (a job on the CPU counts its
    runtime, as one device); the wall time on ``gpus`` GPUs schedules the jobs longest
    first, each on the devices that free earliest (a job wanting more than ``gpus`` on
    all of them; the rows of one ``chain``, a training's segments, one job of their summed
    runtime), ignoring the other orders of the workflow (trainings before their
    passes): a lower bound where those bind."""
    chains: dict[Any, list[dict[str, Any]]] = {}
    for index, row in enumerate(rows):
        chains.setdefault(row.get("chain", index), []).append(row)
    jobs = [
        {**chain[0], "runtime": sum(row["runtime"] for row in chain)} for chain in chains.values()
    ]
    free = [0.0] * max(1, gpus)
    total = coupling = 0.0
    for row in sorted(jobs, key=lambda row: -row["runtime"]):
        hours = row["runtime"] / 60
        total += max(1, row["gpu"]) * hours
        coupling += max(1, row["gpu"]) * hours if row["job"] in COUPLING_RULES else 0.0
        devices = min(max(1, row["gpu"]), len(free))
        free.sort()
        start = free[devices - 1]
        free[:devices] = [start + hours] * devices
    return (
        f"gpu_hours={total:,.1f} coupling_gpu_hours={coupling:,.1f} "
        f"wall_hours_on={gpus}:{max(free):,.1f}"
    )


def runtime_overruns(
    rows: list[dict[str, Any]], partitions: Mapping[str, str | None], execution: Execution
) -> list[str]:
    """What ``snakemake estimate`` says of the partitions' runtime limits
    (``execution.partition_runtime_limits``, minutes; nothing when none are set): a line
    for every ``plan`` row whose runtime (minutes) exceeds its partition's limit, saying
    what to change; for each of their rules how to move or split its jobs; and a line
    naming the rules whose partition has no limit there. ``partitions``: rule → the
    partition its jobs go to (their ``slurm_partition`` resource), None where none is set.
    """
    limits = execution.partition_runtime_limits
    if not limits:
        return []
    over: dict[str, list[dict[str, Any]]] = {}
    unchecked = {}
    for row in rows:
        partition = partitions.get(row["job"])
        if partition not in limits:
            unchecked[row["job"]] = (
                f"partition {partition}"
                if partition
                else "no slurm_partition: run `snakemake estimate` with the SLURM profile"
            )
        elif row["runtime"] > limits[partition]:
            over.setdefault(row["job"], []).append(row)
    lines = []
    for job, late in over.items():
        partition = partitions[job]
        lines += [_overrun(row, partition, limits[partition]) for row in late]
        submissions = max(-(-row["runtime"] // limits[partition]) for row in late)
        lines.append(_splitting(job, partition, limits[partition], submissions, execution))
    if unchecked:
        lines.append(
            "runtimes not checked (no limit in execution.partition_runtime_limits): "
            + ", ".join(f"{job} ({why})" for job, why in sorted(unchecked.items()))
        )
    return lines


def _overrun(row: dict[str, Any], partition: str, limit: int) -> str:
    """The line of a ``plan`` row whose runtime exceeds the ``limit`` (minutes) of its
    ``partition``."""
    job, runtime = row["job"], row["runtime"]
    shorter = MODEL_JOBS[job].shorter.format(model=row["model"], data=row["data"])
    return (
        f"{job} {row['model']} x {row['data']}: planned {runtime} min, over the {limit} min "
        f"limit of partition {partition}: plan {shorter}, move it to a partition with a "
        f"longer limit, or split it into at least {-(-runtime // limit)} submissions (how: "
        f"below)"
    )


def _splitting(job: str, partition: str, limit: int, submissions: int, execution: Execution) -> str:
    """How the jobs of rule ``job`` longer than the ``limit`` (minutes) of ``partition``
    run anyway: elsewhere, or in at most ``submissions`` that resume each other."""
    resumes = MODEL_JOBS[job].resumes.format(minutes=execution.checkpoint_minutes)
    return (
        f"  {job} on partition {partition}: send it to a partition with a longer limit "
        f"(set-resources: {job}: slurm_partition in the SLURM profile), or run it in "
        f"submissions of {limit} min (set-resources: {job}: runtime: {limit}, as SLURM does "
        f"not start a job asking for more, and retries: {submissions - 1} or more in the "
        f"profile): {resumes}, so each resubmitted or requeued job goes on where the last "
        f"one stopped"
    )


def _size(count: float) -> str:
    """Bytes in decimal units."""
    units = ["B", "KB", "MB", "GB", "TB"]
    index = 0
    while count >= 1000 and index < len(units) - 1:
        count, index = count / 1000, index + 1
    return f"{count:.0f} B" if index == 0 else f"{count:.1f} {units[index]}"
