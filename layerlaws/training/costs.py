"""What a training job needs (torch-free), from the training's settings and its
vocabulary alone: GPU and host memory, disk for its checkpoints, runtime
(``layerlaws.forward.costs``' units)."""

from __future__ import annotations

import math

from layerlaws.forward.costs import FLOPS_PER_SECOND, HOST_BASE_MB, MIB, Needs
from layerlaws.training.plan import TrainingSpec, parameter_count


def activation_bytes(spec: TrainingSpec, on_gpu: bool) -> int:
    """The activations one batch keeps for the backward pass, float32: per token and block,
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
    return spec.batch_size * spec.context * spec.num_layers * per_token * 4


def training_needs(
    spec: TrainingSpec, vocab_size: int, on_gpu: bool, tokens: int | None = None
) -> Needs:
    """Needs of the training ``spec`` from scratch, over a vocabulary of ``vocab_size``, in
    float32 with AdamW (weights, gradients, two moments): a pass's logits (three copies:
    the logits, their softmax and its gradient) and its blocks' activations
    (``activation_bytes``; a pass holds ``batch_size`` sequences at most), its checkpoints
    saved (and one optimizer state), and the time of ``tokens`` training tokens (6 FLOPs
    per parameter and token; ``training.epochs.planned_tokens``; by default steps ×
    batch_size × context)."""
    parameters = parameter_count(spec, vocab_size)
    batch_tokens = spec.batch_size * spec.context
    logits = 3 * batch_tokens * vocab_size * 4
    device_bytes = 16 * parameters + logits + activation_bytes(spec, on_gpu)
    flops = 6 * parameters * (spec.tokens_seen(spec.steps) if tokens is None else tokens)
    seconds = flops / FLOPS_PER_SECOND["gpu" if on_gpu else "cpu"]
    host = HOST_BASE_MB * MIB + (4 * parameters if on_gpu else device_bytes)
    return Needs(
        gpu=1 if on_gpu else 0,
        gpu_mb=math.ceil(device_bytes / MIB) if on_gpu else 0,
        mem_mb=math.ceil(host / MIB),
        disk_mb=max(1, math.ceil((len(spec.checkpoints) + 2) * 4 * parameters / MIB)),
        runtime=max(10, math.ceil(2 * seconds / 60) + 5),
    )
