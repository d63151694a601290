"""What a training job needs (torch-free), from the training's settings and its
vocabulary alone: GPU and host memory, disk for its checkpoints, runtime
(``layerlaws.forward.costs``' units)."""

from __future__ import annotations

import math

from layerlaws.forward.costs import FLOPS_PER_SECOND, HOST_BASE_MB, MIB, Needs
from layerlaws.training.plan import TrainingSpec, parameter_count


def training_needs(spec: TrainingSpec, vocab_size: int, on_gpu: bool) -> Needs:
    """Needs of the training ``spec`` from scratch, over a vocabulary of ``vocab_size``, in
    float32 with AdamW (weights, gradients, two moments): batches whose logits dominate
    the activations, its checkpoints saved (and one optimizer state)."""
    parameters = parameter_count(spec, vocab_size)
    batch_tokens = spec.batch_size * spec.context
    device_bytes = 16 * parameters + 3 * batch_tokens * vocab_size * 4
    flops = 6 * parameters * batch_tokens * spec.steps
    seconds = flops / FLOPS_PER_SECOND["gpu" if on_gpu else "cpu"]
    host = HOST_BASE_MB * MIB + (4 * parameters if on_gpu else device_bytes)
    return Needs(
        gpu=1 if on_gpu else 0,
        gpu_mb=math.ceil(device_bytes / MIB) if on_gpu else 0,
        mem_mb=math.ceil(host / MIB),
        disk_mb=max(1, math.ceil((len(spec.checkpoints) + 2) * 4 * parameters / MIB)),
        runtime=max(10, math.ceil(2 * seconds / 60) + 5),
    )
