"""Data-parallel training without torch: how many processes (one GPU each) a training's
jobs run in, and which of a step's sequences each of them reads.

A training of N processes reads the same global batch at every step as one process does
(``plan.batch_indices``): rank r takes the r-th of N slices of it (sizes as equal as can
be), and the gradients are averaged over the ranks with each rank's loss weighted by its
share of the step's sequences, so that the update is one process's over the whole batch
(``train.accumulate_gradients``). Aubry et al. (Appendix A.7) trained their ViTs
data-parallel on 4 GPUs the same way.
"""

from __future__ import annotations

import numpy as np

from layerlaws.core.errors import LayerlawsError

ALLREDUCE_BYTES_PER_SECOND = 50e9
"""Bus bandwidth planned for the all-reduce of the gradients between the GPUs of one node,
bytes per second: NCCL's ring all-reduce reaches about 25 GB/s over PCIe 4 and over 150
GB/s over NVLink; 50 GB/s is a cautious figure between them."""


def chosen_gpus(setting: int | str, batch_size: int, available: int, per_node: int) -> int:
    """The processes (GPUs) of a training's jobs: ``setting`` (``training.<key>.gpus``) when
    it is a number; for ``auto``, the largest divisor of ``batch_size`` that is at most
    ``available`` (the GPUs the run may use at once, ``JobPlanner.training_gpus``) and
    ``per_node`` (``execution.gpus_per_node``): the trainings are the plan's longest chains
    of jobs, one segment after another, so each is spread as wide as one node allows; the
    GPU-hours grow only by the all-reduce (``allreduce_seconds``)."""
    if setting != "auto":
        return int(setting)
    cap = max(1, min(available, per_node, batch_size))
    return max(count for count in range(1, cap + 1) if batch_size % count == 0)


def job_processes(gpu_resource: int, setting: int | str) -> int:
    """The processes of a training job: its ``gpu_resource`` (the GPUs the planner gave it,
    ``chosen_gpus``), or on the CPU (no gpu resource) the ``setting``
    (``training.<key>.gpus``) when it is a number, else 1."""
    if gpu_resource:
        return int(gpu_resource)
    return 1 if setting == "auto" else int(setting)


def check_split(batch_size: int, gpus: int, key: str = "<key>") -> None:
    """A batch of ``batch_size`` sequences splits evenly over ``gpus`` processes (each reads
    batch_size / gpus of every step): else a LayerlawsError saying what to change."""
    if batch_size % gpus:
        raise LayerlawsError(
            f"config training.{key}: batch_size {batch_size} does not split over {gpus} "
            f"processes; every process reads batch_size / gpus sequences a step: make "
            f"batch_size a multiple of {gpus} or set training.{key}.gpus to a divisor of it"
        )


def check_node(gpus: int, per_node: int, key: str) -> None:
    """A training of ``gpus`` processes fits one node of ``per_node`` GPUs: else a
    LayerlawsError. (Across nodes a job would need ``srun`` to start torchrun on each node
    under SLURM, which the Snakemake job, itself one task on one node, does not do.)"""
    if gpus > per_node:
        raise LayerlawsError(
            f"config training.{key}: gpus {gpus} is more than one node holds "
            f"(execution.gpus_per_node: {per_node}); a training runs on one node: lower "
            f"training.{key}.gpus or raise execution.gpus_per_node"
        )


def rank_rows(rows: np.ndarray, rank: int, ranks: int) -> np.ndarray:
    """The slice of one step's packed-sequence ``rows`` (``plan.batch_indices``) that
    process ``rank`` of ``ranks`` reads: the rank-th of ``ranks`` consecutive slices of as
    equal sizes as can be. A LayerlawsError when the step has fewer sequences than ranks
    (a training with epochs over a corpus far smaller than steps × batch_size)."""
    if len(rows) < ranks:
        raise LayerlawsError(
            f"a training step reads {len(rows)} sequences, fewer than its {ranks} processes; "
            f"lower training.<key>.gpus or steps (with epochs, each step reads corpus / "
            f"(steps / epochs) sequences)"
        )
    return np.array_split(rows, ranks)[rank]


def allreduce_seconds(parameters: int, gpus: int) -> float:
    """Seconds one step's gradient all-reduce takes over ``gpus`` GPUs of one node: a ring
    all-reduce sends and receives 2 (N − 1) / N of the float32 gradients (4 bytes a
    parameter) through each GPU, at ``ALLREDUCE_BYTES_PER_SECOND``; 0 on one GPU."""
    return 2 * (gpus - 1) / gpus * 4 * parameters / ALLREDUCE_BYTES_PER_SECOND


def exposed_allreduce_seconds(parameters: int, gpus: int, backward_seconds: float) -> float:
    """Seconds a step waits for its gradient all-reduce (``allreduce_seconds``) beyond its
    backward pass of ``backward_seconds``: DistributedDataParallel all-reduces the
    gradients in buckets as the backward pass computes them, so only what outlasts the
    pass adds to the step. (For a rank's pass of t tokens, the all-reduce over the backward
    pass's 4 FLOPs a parameter and token is 2 (N − 1) / N · F / (B · t), F the FLOPs a
    second: 0.43 for 8 GPUs and 4,096 tokens at 5e13 FLOP/s and 50 GB/s, hidden whole.)"""
    return max(0.0, allreduce_seconds(parameters, gpus) - backward_seconds)
