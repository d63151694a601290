"""What a training job needs (torch-free), from the training's settings and its
vocabulary alone: GPU and host memory, disk for its checkpoints, runtime
(``layerlaws.forward.costs``' units)."""

from __future__ import annotations

import math
from dataclasses import replace

from layerlaws.forward.costs import FLOPS_PER_SECOND, GPU_USABLE, HOST_BASE_MB, MIB, Needs
from layerlaws.training.parallel import exposed_allreduce_seconds
from layerlaws.training.plan import TrainingSpec, parameter_count


def activation_bytes(spec: TrainingSpec, on_gpu: bool) -> int:
    """The activations one pass (``micro_batch_size`` sequences) keeps for the backward
    pass, float32: per token and block,
    the residual stream and its norms (4·d), the queries, keys, values and attention output
    (4 · heads · head_dim), the MLP's gate, up and activated values (3 · d_ff) and, on the
    CPU, the attention probabilities (heads · context: scaled dot-product attention's CPU
    kernel keeps them; its GPU kernels keep none). Yao & Xu's 12-block model of width
    512 at 2,048 tokens keeps 0.8 GB per sequence on a GPU, 3.2 GB on the CPU: a term the
    rehearsal found missing from the plan (peak 2.87 GB against 2.65 GB planned)."""
    attention = spec.num_heads * spec.head_dim
    per_token = 4 * spec.hidden_size + 4 * attention + 3 * spec.intermediate_size
    if not on_gpu:
        per_token += spec.num_heads * spec.context
    return spec.micro_batch_size * spec.context * spec.num_layers * per_token * 4


def device_bytes(spec: TrainingSpec, vocab_size: int, on_gpu: bool) -> int:
    """The memory a training holds on its device, float32 with AdamW: the weights, their
    gradients and two moments (16 bytes a parameter), and one pass's logits (three copies:
    the logits, their softmax and its gradient) and activations (``activation_bytes``),
    the pass of ``micro_batch_size`` sequences over a vocabulary of ``vocab_size``."""
    logits = 3 * spec.micro_batch_size * spec.context * vocab_size * 4
    return 16 * parameter_count(spec, vocab_size) + logits + activation_bytes(spec, on_gpu)


def gpu_fit_problem(spec: TrainingSpec, vocab_size: int, gpu_memory_gb: float, key: str) -> str:
    """Why training ``key`` does not fit one GPU of ``gpu_memory_gb`` (its GPU_USABLE share,
    as every job is planned), saying the ``micro_batch_size`` that does; "" when it fits."""
    usable = gpu_memory_gb * 2**30 * GPU_USABLE
    planned = device_bytes(spec, vocab_size, on_gpu=True)
    if planned <= usable:
        return ""
    sizes = range(spec.micro_batch_size - 1, 0, -1)
    smaller = (replace(spec, micro_batch_size=size) for size in sizes)
    fitting = next((s for s in smaller if device_bytes(s, vocab_size, True) <= usable), None)
    fix = "lower its context, or give it a smaller model or vocabulary"
    if fitting is not None:
        fix = (
            f"set training.{key}.micro_batch_size: {fitting.micro_batch_size} (planned "
            f"{device_bytes(fitting, vocab_size, True) / 2**30:.1f} GiB)"
        )
    return (
        f"config training.{key}: a pass of {spec.micro_batch_size} sequences of "
        f"{spec.context} tokens (micro_batch_size) is planned at {planned / 2**30:.1f} GiB of "
        f"GPU memory, more than the {usable / 2**30:.1f} GiB one GPU gives a job "
        f"(execution.gpu_memory_gb: {gpu_memory_gb:g}, {GPU_USABLE:.0%} of it); {fix}"
    )


def training_needs(
    spec: TrainingSpec,
    vocab_size: int,
    on_gpu: bool,
    tokens: int | None = None,
    gpus: int = 1,
) -> Needs:
    """Needs of a job of the training ``spec`` from scratch (a segment, ``segment_ends``),
    over a vocabulary of ``vocab_size``, in ``gpus`` data-parallel processes (one GPU each
    on a GPU): the device memory of each (``device_bytes`` of a rank's passes,
    ``rank_spec``), the host memory of all (each process holds a float32 copy of the
    weights it loads or saves), the save it ends with (the weights and AdamW's two moments,
    float32), and the time of ``tokens`` training tokens (6 FLOPs per parameter and token,
    twice the time ``FLOPS_PER_SECOND`` gives, spread over the ``gpus``; the segment's share
    of ``training.epochs.planned_tokens``; by default steps × batch_size × context) plus
    what every step's gradient all-reduce adds beyond its backward pass
    (``parallel.exposed_allreduce_seconds``, the backward pass at the full
    ``FLOPS_PER_SECOND``: 4 of the 6 FLOPs). Its GPU-hours are ``gpus`` × its runtime."""
    parameters = parameter_count(spec, vocab_size)
    held = device_bytes(rank_spec(spec, gpus), vocab_size, on_gpu)
    tokens = spec.tokens_seen(spec.steps) if tokens is None else tokens
    seconds = 6 * parameters * tokens / FLOPS_PER_SECOND["gpu" if on_gpu else "cpu"]
    steps = max(1, -(-tokens // (spec.batch_size * spec.context)))
    backward = 4 / 6 * seconds / gpus / steps  # a rank's backward pass of a step
    exchanged = steps * exposed_allreduce_seconds(parameters, gpus, backward)
    host = HOST_BASE_MB * MIB + (4 * parameters if on_gpu else held)
    return Needs(
        gpu=gpus if on_gpu else 0,
        gpu_mb=math.ceil(held / MIB) if on_gpu else 0,
        mem_mb=math.ceil(gpus * host / MIB),
        disk_mb=max(1, math.ceil(3 * 4 * parameters / MIB)),
        runtime=max(10, math.ceil((2 * seconds / gpus + exchanged) / 60) + 5),
    )


def rank_spec(spec: TrainingSpec, gpus: int) -> TrainingSpec:
    """``spec`` as one of ``gpus`` processes runs its passes: each reads batch_size / gpus
    sequences a step, in passes of at most ``micro_batch_size``."""
    return replace(spec, micro_batch_size=min(spec.micro_batch_size, spec.batch_size // gpus))
