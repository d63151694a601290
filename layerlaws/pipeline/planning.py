"""The needs of every model-running job of an expanded config (the stages' cost models,
``layerlaws.equilearning.costs``, ``layerlaws.coupling.costs``, ``layerlaws.training.costs``
over ``layerlaws.forward.costs``, applied to its runs): as Snakemake resources when a job
is scheduled (its prepared model and tokens exist then), and as a plan for the whole
config before anything runs.

A model's size comes from its prepared facts when they exist, else from its
``models.<key>.size`` entry, else from its config (read without weights: a local folder,
a GGUF file, or the hub). Before tokenisation a run's tokens are bounded by its dataset's
``n_samples`` × ``max_tokens`` (or its ``token_budget``).
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import asdict
from functools import partial
from itertools import product
from pathlib import Path
from typing import Any

import polars as pl

from layerlaws.core.dtypes import DTYPE_BYTES
from layerlaws.core.errors import LayerlawsError
from layerlaws.coupling.costs import coupling_merge_needs, coupling_needs
from layerlaws.equilearning.costs import equilearning_pass_needs
from layerlaws.equilearning.settings import observer_specs
from layerlaws.forward.batching import CPU_BATCH_SIZE
from layerlaws.forward.costs import (
    HOST_BASE_MB,
    ModelSize,
    Needs,
    hidden_states_bytes,
    model_pass_needs,
)
from layerlaws.forward.kept_states import storage_dtype
from layerlaws.forward.settings import regressed_stack
from layerlaws.models.metadata import MODEL_METADATA
from layerlaws.models.quantization import stage_quantization
from layerlaws.pipeline.execution import Execution
from layerlaws.pipeline.expansion import ExpandedConfig
from layerlaws.pipeline.layout import Layout
from layerlaws.text.corpus import prompt_count
from layerlaws.training.costs import gpu_fit_problem, training_needs
from layerlaws.training.epochs import planned_tokens
from layerlaws.training.plan import (
    TrainingSpec,
    parameter_count,
    previous_segment_end,
    segment_ends,
)

GUESSED_VOCABULARY = 50_000
"""Vocabulary planned for a training whose tokenizer model is not yet prepared."""
ASSUMED_TEXTS = 10_000
"""Texts planned for a dataset of ``n_samples: all`` before it is sampled."""


def prepared_size(folder: str | Path) -> ModelSize:
    """The size of a prepared model, from its facts file."""
    return ModelSize.of(json.loads((Path(folder) / MODEL_METADATA).read_text()))


def token_table_size(path: str | Path) -> tuple[int, int]:
    """(tokens, longest sequence) of a tokens table."""
    lengths = pl.scan_parquet(path).group_by("sentence_id").len().collect()["len"]
    return int(lengths.sum()), int(lengths.max())


def repeated_tokens(path: str | Path) -> int:
    """Token ids occurring at least twice among the text tokens of a tokens table: at
    least as many as the targets of two rows or more of any offset (targets are text
    tokens)."""
    counts = pl.scan_parquet(path).filter(~pl.col("is_special")).group_by("token_id").len()
    return int(counts.filter(pl.col("len") >= 2).select(pl.len()).collect().item())


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
    ``layout`` puts them."""

    def __init__(self, expanded: ExpandedConfig, layout: Layout | None = None) -> None:
        self.expanded = expanded
        self.config = expanded.config
        self.layout = layout or Layout()
        self.execution = Execution.from_config(self.config)

    @classmethod
    def from_config(cls, config: Mapping[str, Any], layout: Layout | None = None) -> JobPlanner:
        """The planner of a validated config (expanded and checked here)."""
        return cls(ExpandedConfig.from_config(config, layout), layout)

    def _model(self, key: str) -> Mapping[str, Any]:
        return self.expanded.models[key]

    def _batch_tokens(self, longest: int) -> int:
        batch = self.execution.batch_size
        return (CPU_BATCH_SIZE if batch == "auto" else int(batch)) * longest

    def _on_gpu(self) -> bool:
        return self.execution.device != "cpu"

    def _open_classes(self, size: ModelSize, tokens: int, tokens_path: str | Path) -> int:
        """Classes the separation fuzziness may hold sums of at most (those of two rows or
        more): ``max_classes`` under ``classes: frequent``; under ``all`` the ids
        repeated among the text tokens of the run's tokens table once it exists, before
        it min(tokens // 2, vocabulary)."""
        settings = self.config["equilearning"]["fuzziness"]
        if settings["classes"] == "frequent":
            return settings["max_classes"]
        if Path(tokens_path).is_file():
            return min(repeated_tokens(tokens_path), size.vocab_size)
        return min(tokens // 2, size.vocab_size)

    def _pass(
        self,
        model: str,
        size: ModelSize,
        tokens: int,
        longest: int,
        *,
        tokens_path: str | Path,
        shards: int = 1,
    ) -> Needs:
        """Needs of an equi-learning pass over ``tokens`` (those of ``tokens_path`` once it
        exists), or of one of its ``shards`` jobs (a share of the tokens each, writing its
        statistics): of an encoder–decoder, the part of it the pass runs and the layers it
        regresses (``ModelSize.running``: under ``equilearning.encoder_decoder: one_stack``
        the encoder alone under next-token probing, the decoder's layers of the whole model
        under span corruption); with what its named observers declare
        (``equilearning.observers``) for texts of ``longest`` tokens."""
        settings = self.config["equilearning"]
        probe = self._model(model).get("probe", "auto")
        return equilearning_pass_needs(
            named=observer_specs(settings, model),
            tokens_per_text=longest,
            size=size.running(regressed_stack(probe, settings["encoder_decoder"])),
            dtype=self._model(model)["dtype"],
            n_tokens=-(-tokens // shards),
            batch_tokens=self._batch_tokens(longest),
            offsets=settings["offsets"],
            norms=settings["norms"],
            controls=settings["controls"],
            on_gpu=self._on_gpu(),
            gpus=self._model(model)["gpus"],
            gpu_memory_gb=self.execution.gpu_memory_gb,
            fuzziness_open_classes=self._open_classes(size, tokens, tokens_path),
            statistics_written=shards > 1,
            quantization=stage_quantization(self._model(model), "passes"),
        )

    def _hidden(self, model: str, size: ModelSize, tokens: int, longest: int) -> Needs:
        dtype = self._model(model)["dtype"]
        stored = storage_dtype(dtype, self.config["hidden_states"]["dtype"])
        return model_pass_needs(
            size=size,
            dtype=dtype,
            n_tokens=tokens,
            batch_tokens=self._batch_tokens(longest),
            on_gpu=self._on_gpu(),
            gpus=self._model(model)["gpus"],
            gpu_memory_gb=self.execution.gpu_memory_gb,
            output_bytes=hidden_states_bytes(size, tokens, DTYPE_BYTES[stored]),
            quantization=stage_quantization(self._model(model), "passes"),
        )

    def _coupling(self, model: str, size: ModelSize, prompts: str, shards: int = 1) -> Needs:
        """Needs of a coupling job of ``model`` on ``prompts`` (``coupling_needs``), or of
        one of its ``shards`` jobs."""
        return coupling_needs(
            size=size,
            settings=self.config["coupling"],
            prompt_set=self.config["coupling"]["prompts"][prompts],
            shards=shards,
            dtype=self._model(model)["dtype"],
            quantization=stage_quantization(self._model(model), "coupling"),
            on_gpu=self._on_gpu(),
            gpus=self._model(model)["gpus"],
            gpu_memory_gb=self.execution.gpu_memory_gb,
            step_zero=self.expanded.step_zero_model(model) is not None,
        )

    # Resource functions of the rules, called with the job's wildcards and input files. Snakemake
    # may ask before the inputs exist (to print a dry run); then the size is the config's
    # ``size`` entry and the tokens the dataset's bound, and it asks again once they exist.

    def _known_size(self, model: str, folder: str | Path) -> ModelSize | None:
        if (Path(folder) / MODEL_METADATA).is_file():
            return prepared_size(folder)
        return ModelSize.of(self._model(model)["size"]) if "size" in self._model(model) else None

    def _known_tokens(self, dataset: str, path: str | Path) -> tuple[int, int]:
        return token_table_size(path) if Path(path).is_file() else self.token_bound(dataset)

    def _placeholder(self, model: str) -> Needs:
        gpus = self._model(model)["gpus"]
        return Needs(int(gpus) if gpus != "auto" else 1, 0, HOST_BASE_MB, 1, 10)

    def _run_needs(self, wildcards: Any, input: Any, job: Any) -> Needs:
        """``job(model, size, tokens, longest)`` for a model × dataset run."""
        size = self._known_size(wildcards.model, input.model)
        if size is None:
            return self._placeholder(wildcards.model)
        return job(wildcards.model, size, *self._known_tokens(wildcards.dataset, input.tokens))

    def equilearning_pass(self, wildcards: Any, input: Any) -> Needs:
        """The whole pass, or (with shards) the merge of its shards on the CPU: the merged
        statistics, one shard's read and one restored in host memory."""
        shards = self.config["equilearning"]["shards"]
        needs = self._run_needs(
            wildcards, input, partial(self._pass, tokens_path=input.tokens, shards=shards)
        )
        return needs if shards == 1 else self._merge(3 * needs.disk_mb, needs.disk_mb)

    def equilearning_pass_shard(self, wildcards: Any, input: Any) -> Needs:
        shards = self.config["equilearning"]["shards"]
        return self._run_needs(
            wildcards, input, partial(self._pass, tokens_path=input.tokens, shards=shards)
        )

    @staticmethod
    def _merge(held_mb: int, disk_mb: int) -> Needs:
        """A job on the CPU that merges a sharded job's outputs, holding ``held_mb`` of them
        in host memory and writing ``disk_mb``."""
        return Needs(0, 0, HOST_BASE_MB + held_mb, disk_mb, 10)

    def extract_hidden(self, wildcards: Any, input: Any) -> Needs:
        return self._run_needs(wildcards, input, self._hidden)

    def measure_coupling(self, wildcards: Any, input: Any) -> Needs:
        """The whole coupling job, or (with shards) the merge of its shards: on the CPU,
        a prompt at a time (``coupling_merge_needs``)."""
        size = self._known_size(wildcards.model, input.model)
        if size is None:
            return self._placeholder(wildcards.model)
        if self.config["coupling"]["shards"] == 1:
            return self._coupling(wildcards.model, size, wildcards.prompts)
        return coupling_merge_needs(
            size=size,
            settings=self.config["coupling"],
            prompt_set=self.config["coupling"]["prompts"][wildcards.prompts],
        )

    def measure_coupling_shard(self, wildcards: Any, input: Any) -> Needs:
        size = self._known_size(wildcards.model, input.model)
        if size is None:
            return self._placeholder(wildcards.model)
        shards = self.config["coupling"]["shards"]
        return self._coupling(wildcards.model, size, wildcards.prompts, shards)

    def train_checkpoint(self, wildcards: Any, input: Any) -> Needs:
        """A segment of a training from scratch, planned over the tokens it reads
        (``segment_tokens``); the vocabulary is the tokenizer model's (a guess of 50,000
        until it is prepared)."""
        owner = self.config["training"][wildcards.training]["tokenizer"]
        size = self._known_size(owner, input.tokenizer)
        vocab_size = size.vocab_size if size is not None else GUESSED_VOCABULARY
        tokens = self.segment_tokens(wildcards.training, int(wildcards.step))
        return self.training_needs(wildcards.training, vocab_size, tokens)

    def segment_tokens(self, training: str, end: int) -> int:
        """The tokens the segment of ``training`` that ends at step ``end`` reads: its steps'
        share of ``training_tokens`` (rounded up)."""
        spec = TrainingSpec.of(self.config["training"][training])
        steps = end - (previous_segment_end(spec, end) or 0)
        return -(-self.training_tokens(training) * steps // spec.steps)

    def training_needs(self, training: str, vocab_size: int, tokens: int) -> Needs:
        """Needs of a job of ``training`` over a vocabulary of ``vocab_size`` that reads
        ``tokens`` (``training_needs``); a LayerlawsError when its pass does not fit one GPU
        (``gpu_fit_problem``)."""
        spec = TrainingSpec.of(self.config["training"][training])
        problem = self._fit_problem(spec, vocab_size, training)
        if problem:
            raise LayerlawsError(problem)
        return training_needs(spec, vocab_size, self._on_gpu(), tokens)

    def _fit_problem(self, spec: TrainingSpec, vocab_size: int, training: str) -> str:
        if not self._on_gpu():
            return ""
        return gpu_fit_problem(spec, vocab_size, self.execution.gpu_memory_gb, training)

    def training_fit_problem(self, training: str) -> str:
        """Why ``training``'s pass does not fit one GPU (``gpu_fit_problem``), where its
        tokenizer model's vocabulary is known without reading the model (its prepared
        facts or ``models.<key>.size``); "" when it fits, runs on the CPU, or is not known
        yet (its jobs check it when they are planned)."""
        settings = self.config["training"][training]
        recorded = self._recorded_size(settings["tokenizer"])
        if recorded is None:
            return ""
        return self._fit_problem(TrainingSpec.of(settings), recorded[0].vocab_size, training)

    def packed_corpus(self, training: str) -> dict[str, Any] | None:
        """The facts of a training's packed corpus (its corpus.json), once it is packed."""
        path = Path(self.layout.training(training)) / "corpus.json"
        return json.loads(path.read_text()) if path.is_file() else None

    def training_tokens(self, training: str) -> int:
        """The tokens a training reads (``training.epochs.planned_tokens``: its packed
        corpus's, else its token budget's or its dataset's assumed size's)."""
        settings = self.config["training"][training]
        dataset = self.config["datasets"][settings["dataset"]]
        return planned_tokens(settings, dataset, self.packed_corpus(training))

    # A plan of the whole config, before anything runs.

    def _recorded_size(self, model: str) -> tuple[ModelSize, str] | None:
        """A model's size where it is written down: its prepared facts, else its
        ``models.<key>.size``; None otherwise."""
        prepared = Path(self.layout.model(model))
        if (prepared / MODEL_METADATA).is_file():
            return prepared_size(prepared), "prepared model"
        if "size" in self._model(model):
            return ModelSize.of(self._model(model)["size"]), "config size"
        return None

    def size(self, model: str) -> tuple[ModelSize, str]:
        """A model's size and where it was read from."""
        recorded = self._recorded_size(model)
        if recorded is not None:
            return recorded
        training = self._model(model)["source"].get("training")
        if training is not None:
            return self._trained_size(training), "training settings"
        try:
            return config_size(self._model(model)), "model config"
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
        recorded = self._recorded_size(model)
        if recorded is not None:
            size, read_from = recorded
            return size.num_layers, size.hidden_size, read_from
        training = self._model(model)["source"].get("training")
        if training is not None:
            spec = TrainingSpec.of(self.config["training"][training])
            return spec.num_layers, spec.hidden_size, "training settings"
        return None

    def _trained_size(self, training: str) -> ModelSize:
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
        """One row per model-running job of the config: what it runs on and needs (a
        training's segments, each going on from the one before, with their ``chain``: the
        training)."""
        rows = []
        for model, dataset in self.expanded.runs:
            size, sized_by = self.size(model)
            tokens, longest, counted = self.tokens(model, dataset)
            tokens_path = self.layout.tokens(model, dataset)
            shards = self.config["equilearning"]["shards"]
            needs = self._pass(model, size, tokens, longest, tokens_path=tokens_path, shards=shards)
            share = -(-tokens // shards)
            jobs = [
                ("equilearning_pass_shard", f"{dataset}[{shard}/{shards}]", share, needs)
                for shard in range(shards)
            ]
            if shards == 1:
                jobs = [("equilearning_pass", dataset, tokens, needs)]
            if self.config["hidden_states"]["keep"]:
                hidden = self._hidden(model, size, tokens, longest)
                jobs.append(("extract_hidden", dataset, tokens, hidden))
            for job, data, job_tokens, needs in jobs:
                rows.append(
                    {
                        "job": job,
                        "model": model,
                        "data": data,
                        "parameters": size.parameters,
                        "sized_by": sized_by,
                        "tokens": job_tokens,
                        "tokens_known": counted,
                        "cache_bytes_float32": hidden_states_bytes(size, job_tokens, 4),
                        **asdict(needs),
                    }
                )
        shards = self.config["coupling"]["shards"]
        for (model, prompts), shard in product(self.expanded.coupling_runs, range(shards)):
            size, sized_by = self.size(model)
            needs = self._coupling(model, size, prompts, shards)
            rows.append(
                {
                    "job": "measure_coupling" if shards == 1 else "measure_coupling_shard",
                    "model": model,
                    "data": prompts if shards == 1 else f"{prompts}[{shard}/{shards}]",
                    "parameters": size.parameters,
                    "sized_by": sized_by,
                    "tokens": -(
                        -prompt_count(self.config["coupling"]["prompts"][prompts]) // shards
                    ),
                    "tokens_known": "prompts",
                    "cache_bytes_float32": 0,
                    **asdict(needs),
                }
            )
        for training, settings in self.config["training"].items():
            size = self._trained_size(training)
            ends = segment_ends(TrainingSpec.of(settings))
            for index, end in enumerate(ends):
                tokens = self.segment_tokens(training, end)
                rows.append(
                    {
                        "job": "train_checkpoint",
                        "model": training,
                        "data": f"{settings['dataset']}[{index}/{len(ends)}]",
                        "parameters": size.parameters,
                        "sized_by": "training settings",
                        "tokens": tokens,
                        "tokens_known": "",
                        "cache_bytes_float32": 0,
                        "chain": training,
                        **asdict(self.training_needs(training, size.vocab_size, tokens)),
                    }
                )
        return rows


def plan_table(rows: list[dict[str, Any]]) -> str:
    """The plan as a text table, with totals: every job's GPUs × memory, host memory, disk
    of its outputs and runtime, and beside them what a float32 cache of every layer's
    states (the pipeline's layout before statistics were streamed) would take."""
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
            f"{row['mem_mb'] / 1024:9.1f} {_size(row['disk_mb'] * 2**20):>9s} "
            f"{row['runtime']:8d} {_size(row['cache_bytes_float32']):>10s}"
        )
    outputs = sum(row["disk_mb"] for row in rows) * 2**20
    cache = sum(row["cache_bytes_float32"] for row in rows)
    lines.append(
        f"total outputs of these jobs: {_size(outputs)}; a float32 cache of every layer's "
        f"states would take {_size(cache)}; models sized by: "
        + ", ".join(sorted({f"{row['model']}: {row['sized_by']}" for row in rows}))
    )
    return "\n".join(lines)


COUPLING_JOBS = {"measure_coupling", "measure_coupling_shard"}
"""The rules whose jobs measure coupling: counted apart in ``gpu_hours_line``."""


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
        coupling += max(1, row["gpu"]) * hours if row["job"] in COUPLING_JOBS else 0.0
        devices = min(max(1, row["gpu"]), len(free))
        free.sort()
        start = free[devices - 1]
        free[:devices] = [start + hours] * devices
    return (
        f"gpu_hours={total:,.1f} coupling_gpu_hours={coupling:,.1f} "
        f"wall_hours_on={gpus}:{max(free):,.1f}"
    )


FEWER_TOKENS = "fewer tokens (datasets.{data}.n_samples or token_budget)"
FEWER_PROMPTS = "fewer prompts (coupling.prompts.{data}) or coupling.token_layers"
SHORTER = {
    "equilearning_pass": FEWER_TOKENS,
    "equilearning_pass_shard": FEWER_TOKENS + " or more equilearning.shards",
    "extract_hidden": FEWER_TOKENS,
    "measure_coupling": FEWER_PROMPTS,
    "measure_coupling_shard": FEWER_PROMPTS + " or more coupling.shards",
    "train_checkpoint": (
        "a smaller training.{model}.segment_steps (or fewer tokens: token_budget, or steps "
        "without epochs)"
    ),
}
"""How each planned job is made shorter, with its ``plan`` row's model and data; a ``plan``
row's job is the rule that runs it (a shard's rule when the work is sharded)."""
RESUMES = {
    "train_checkpoint": (
        "it resumes from its latest checkpoint or resume point (training.<key>.checkpoints, "
        "segment_steps)"
    )
}
"""Where a rule's job resumed after a kill goes on from, when not from its progress saves."""
SAVES = "it saves its progress every execution.checkpoint_minutes ({minutes:g} min) at most"


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
    shorter = SHORTER[job].format(model=row["model"], data=row["data"])
    return (
        f"{job} {row['model']} x {row['data']}: planned {runtime} min, over the {limit} min "
        f"limit of partition {partition}: plan {shorter}, move it to a partition with a "
        f"longer limit, or split it into at least {-(-runtime // limit)} submissions (how: "
        f"below)"
    )


def _splitting(job: str, partition: str, limit: int, submissions: int, execution: Execution) -> str:
    """How the jobs of rule ``job`` longer than the ``limit`` (minutes) of ``partition``
    run anyway: elsewhere, or in at most ``submissions`` that resume each other."""
    resumes = RESUMES.get(job, SAVES).format(minutes=execution.checkpoint_minutes)
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
