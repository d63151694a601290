"""The model jobs of the training stage, as the workflow schedules them: a training's
segments (``train_checkpoint``), each going on from the one before. Their needs apply
``layerlaws.training.costs`` to the tokens a segment reads; ``planner`` is the workflow's
``JobPlanner`` (``layerlaws.pipeline.planning``), which sizes the tokenizer model."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from layerlaws.core.errors import LayerlawsError
from layerlaws.core.model_jobs import ModelJob, plan_row
from layerlaws.forward.costs import Needs
from layerlaws.training.costs import gpu_fit_problem, rank_spec, training_needs
from layerlaws.training.epochs import planned_tokens
from layerlaws.training.parallel import check_node, check_split, chosen_gpus
from layerlaws.training.plan import TrainingSpec, previous_segment_end, segment_ends

GUESSED_VOCABULARY = 50_000
"""Vocabulary planned for a training whose tokenizer model is not yet prepared."""


def packed_corpus(planner: Any, training: str) -> dict[str, Any] | None:
    """The facts of a training's packed corpus (its corpus.json), once it is packed."""
    path = Path(planner.layout.training(training)) / "corpus.json"
    return json.loads(path.read_text()) if path.is_file() else None


def training_tokens(planner: Any, training: str) -> int:
    """The tokens a training reads (``training.epochs.planned_tokens``: its packed corpus's,
    else its token budget's or its dataset's assumed size's)."""
    settings = planner.config["training"][training]
    dataset = planner.config["datasets"][settings["dataset"]]
    return planned_tokens(settings, dataset, packed_corpus(planner, training))


def segment_tokens(planner: Any, training: str, end: int) -> int:
    """The tokens the segment of ``training`` that ends at step ``end`` reads: its steps'
    share of ``training_tokens`` (rounded up)."""
    spec = TrainingSpec.of(planner.config["training"][training])
    steps = end - (previous_segment_end(spec, end) or 0)
    return -(-training_tokens(planner, training) * steps // spec.steps)


def training_gpus(planner: Any, training: str) -> int:
    """The GPUs (data-parallel processes) of every job of ``training``
    (``parallel.chosen_gpus``): its ``gpus`` setting, or for ``auto`` from the GPUs the run
    may use (``planner.training_gpus``: its ``--resources gpu=``) and a node's
    (``execution.gpus_per_node``); 1 under ``execution.device: cpu`` unless set. A
    LayerlawsError when batch_size does not split over them or they exceed a node."""
    settings = planner.config["training"][training]
    per_node = planner.execution.gpus_per_node
    available = planner.training_gpus if planner.on_gpu() else 1
    gpus = chosen_gpus(settings.get("gpus", "auto"), settings["batch_size"], available, per_node)
    check_split(settings["batch_size"], gpus, training)
    check_node(gpus, per_node, training)
    return gpus


def _fit_problem(planner: Any, spec: TrainingSpec, vocab_size: int, training: str) -> str:
    if not planner.on_gpu():
        return ""
    passes = rank_spec(spec, training_gpus(planner, training))
    return gpu_fit_problem(passes, vocab_size, planner.execution.gpu_memory_gb, training)


def segment_needs(planner: Any, training: str, vocab_size: int, tokens: int) -> Needs:
    """Needs of a job of ``training`` over a vocabulary of ``vocab_size`` that reads
    ``tokens`` in its ``training_gpus`` processes (``training_needs``); a LayerlawsError
    when a process's pass does not fit one GPU (``gpu_fit_problem``)."""
    spec = TrainingSpec.of(planner.config["training"][training])
    problem = _fit_problem(planner, spec, vocab_size, training)
    if problem:
        raise LayerlawsError(problem)
    gpus = training_gpus(planner, training)
    return training_needs(spec, vocab_size, planner.on_gpu(), tokens, gpus)


def training_fit_problem(planner: Any, training: str) -> str:
    """Why ``training``'s pass does not fit one GPU (``gpu_fit_problem``), where its
    tokenizer model's vocabulary is known without reading the model (its prepared facts or
    ``models.<key>.size``); "" when it fits, runs on the CPU, or is not known yet (its jobs
    check it when they are planned)."""
    settings = planner.config["training"][training]
    recorded = planner.recorded_size(settings["tokenizer"])
    if recorded is None:
        return ""
    return _fit_problem(planner, TrainingSpec.of(settings), recorded[0].vocab_size, training)


def _checkpoint_needs(planner: Any, wildcards: Any, input: Any) -> Needs:
    """A segment of a training from scratch, planned over the tokens it reads
    (``segment_tokens``); the vocabulary is the tokenizer model's (a guess of 50,000 until
    it is prepared)."""
    owner = planner.config["training"][wildcards.training]["tokenizer"]
    size = planner.known_size(owner, input.tokenizer)
    vocab_size = size.vocab_size if size is not None else GUESSED_VOCABULARY
    tokens = segment_tokens(planner, wildcards.training, int(wildcards.step))
    return segment_needs(planner, wildcards.training, vocab_size, tokens)


MODEL_JOBS = (
    ModelJob(
        "train_checkpoint",
        _checkpoint_needs,
        "a smaller training.{model}.segment_steps (or fewer tokens: token_budget, or steps "
        "without epochs)",
        resumes=(
            "it resumes from its latest checkpoint or resume point (training.<key>.checkpoints, "
            "segment_steps)"
        ),
    ),
)
"""The stage's model-running rules."""


def planned_jobs(planner: Any) -> list[dict[str, Any]]:
    """The plan's rows of every training: its segments, with their ``chain`` (the
    training), as each goes on from the one before."""
    rows = []
    for training, settings in planner.config["training"].items():
        size = planner.trained_size(training)
        ends = segment_ends(TrainingSpec.of(settings))
        for index, end in enumerate(ends):
            tokens = segment_tokens(planner, training, end)
            needs = segment_needs(planner, training, size.vocab_size, tokens)
            data = f"{settings['dataset']}[{index}/{len(ends)}]"
            sized = (size, "training settings")
            rows.append(
                plan_row(
                    "train_checkpoint",
                    training,
                    data,
                    sized,
                    tokens,
                    "",
                    needs,
                    wildcards={"training": training, "step": end},
                    chain=training,
                )
            )
    return rows
