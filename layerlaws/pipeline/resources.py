"""What a model-running job needs, from the model's size, its dtype and the run's tokens
alone (no weights): GPUs and their memory, host memory, disk for its outputs, runtime.

Rules declare these as their resources, so ``--resources gpu=N`` and SLURM count them
(a profile can still override them), and ``snakemake estimate`` (``rules/models.smk``,
``scripts/estimate.py``) prints them for a config before anything runs. The numbers are
deliberately generous estimates; the memory of the equi-learning statistics is exact.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from layerlaws.core.dtypes import DTYPE_BYTES
from layerlaws.forward.batching import activation_vectors
from layerlaws.models.quantization import WEIGHT_BYTES

MIB = 2**20
HOST_BASE_MB = 2048
"""Host memory of a job before its model: the interpreter, torch, transformers."""
GPU_USABLE = 0.9
"""Share of a GPU's memory a job plans to use."""
FLOPS_PER_SECOND = {"gpu": 5e13, "cpu": 5e10}
"""Assumed sustained throughput of a forward pass (float64 statistics run at a tenth)."""
LOAD_BYTES_PER_SECOND = 2e8
"""Assumed speed of reading weights from disk."""


@dataclass(frozen=True)
class ModelSize:
    """The sizes of a model that its jobs' needs depend on."""

    parameters: int
    num_layers: int
    hidden_size: int
    vocab_size: int
    model_type: str | None = field(default=None, compare=False)
    """transformers' name of the family where it is known (prepared facts, the model's
    config): the planner plans the Jacobian products a family can take."""

    @classmethod
    def of(cls, facts: Mapping[str, Any]) -> ModelSize:
        """From a prepared model's facts, or a ``models.<key>.size`` entry of a config."""
        return cls(
            int(facts["parameters"]),
            int(facts["num_layers"]),
            int(facts["hidden_size"]),
            int(facts["vocab_size"]),
            facts.get("model_type"),
        )


@dataclass(frozen=True)
class Needs:
    """What one job needs."""

    gpu: int
    """GPUs to claim (0: runs on the CPU)."""
    gpu_mb: int
    """Memory per GPU, MiB."""
    mem_mb: int
    """Host memory, MiB."""
    disk_mb: int
    """Disk for the job's outputs, MiB."""
    runtime: int
    """Minutes."""


def statistics_bytes(
    size: ModelSize, offsets: Sequence[int], norms: Sequence[str], controls: Sequence[str]
) -> int:
    """Memory of the equi-learning statistics: a co-moment of width hidden_size + targets
    per layer and norm (the last layer once), and one more per offset with rows lacking
    it (every offset but 0)."""
    width = size.hidden_size + len(offsets) * len(controls)
    per_layer_norm = 1 + sum(1 for offset in offsets if offset != 0)
    matrices = (size.num_layers * len(norms) + 1) * per_layer_norm
    return matrices * (width * width + width) * 8


def weights_bytes(size: ModelSize, dtype: str, quantization: str = "none") -> int:
    """Device memory of a model's weights in ``dtype``; under a ``quantization``, those of
    its linear layers at ``WEIGHT_BYTES`` each, the input and output embeddings (planned
    untied) in ``dtype``."""
    if quantization == "none":
        return size.parameters * DTYPE_BYTES[dtype]
    embeddings = min(size.parameters, 2 * size.vocab_size * size.hidden_size)
    quantized = (size.parameters - embeddings) * WEIGHT_BYTES[quantization]
    return math.ceil(quantized) + embeddings * DTYPE_BYTES[dtype]


def _forward_bytes(size: ModelSize, dtype: str, batch_tokens: int, quantization: str) -> int:
    """Weights plus the working memory of a forward pass over ``batch_tokens`` tokens."""
    activations = batch_tokens * activation_vectors(size.num_layers) * size.hidden_size
    return weights_bytes(size, dtype, quantization) + activations * DTYPE_BYTES[dtype]


def _gpus_for(needed_bytes: int, gpus: int | str, gpu_memory_gb: float) -> int:
    if gpus != "auto":
        return int(gpus)
    return max(1, math.ceil(needed_bytes / (gpu_memory_gb * 2**30 * GPU_USABLE)))


def model_pass_needs(
    *,
    size: ModelSize,
    dtype: str,
    n_tokens: int,
    batch_tokens: int,
    on_gpu: bool,
    gpus: int | str,
    gpu_memory_gb: float,
    device_bytes: int = 0,
    host_bytes: int = 0,
    flops_per_token: float = 0.0,
    output_bytes: int = 0,
    quantization: str = "none",
) -> Needs:
    """Needs of a job that runs a model (in ``dtype``, its weights under ``quantization``)
    over ``n_tokens`` tokens in batches of about
    ``batch_tokens``, holding ``device_bytes`` more beside it (statistics) and
    ``host_bytes`` in host memory wherever it runs, doing ``flops_per_token`` of float64
    work beside the forward pass, writing ``output_bytes``.

    On a GPU, ``gpus`` (a number, or ``auto``: as many GPUs of ``gpu_memory_gb`` as the
    weights, the working memory and ``device_bytes`` need) share the device memory and
    the host holds the interpreter and one shard of weights while loading; on a CPU the
    host holds everything.
    """
    device_total = _forward_bytes(size, dtype, batch_tokens, quantization) + device_bytes
    weights = size.parameters * DTYPE_BYTES[dtype]  # read from disk in full
    forward_flops = 2 * size.parameters * n_tokens
    if on_gpu:
        count = _gpus_for(device_total, gpus, gpu_memory_gb)
        gpu_mb = math.ceil(device_total / count / MIB)
        host = HOST_BASE_MB * MIB + min(weights, 5 * 2**30) + host_bytes
        seconds = forward_flops / FLOPS_PER_SECOND["gpu"]
        seconds += flops_per_token * n_tokens / (FLOPS_PER_SECOND["gpu"] / 10)
    else:
        count, gpu_mb = 0, 0
        host = HOST_BASE_MB * MIB + device_total + host_bytes
        seconds = forward_flops / FLOPS_PER_SECOND["cpu"]
        seconds += flops_per_token * n_tokens / (FLOPS_PER_SECOND["cpu"] / 10)
    seconds += weights / LOAD_BYTES_PER_SECOND
    return Needs(
        gpu=count,
        gpu_mb=gpu_mb,
        mem_mb=math.ceil(host / MIB),
        disk_mb=max(1, math.ceil(output_bytes / MIB)),
        runtime=max(10, math.ceil(2 * seconds / 60) + 5),
    )


def equilearning_pass_needs(
    *,
    size: ModelSize,
    dtype: str,
    n_tokens: int,
    batch_tokens: int,
    offsets: Sequence[int],
    norms: Sequence[str],
    controls: Sequence[str],
    on_gpu: bool,
    gpus: int | str,
    gpu_memory_gb: float,
    fuzziness_open_classes: int = 0,
    statistics_written: bool = False,
    quantization: str = "none",
) -> Needs:
    """Needs of the equi-learning pass: the model, its statistics on the device (the
    co-moments of the separation fuzziness included), the separation fuzziness's folded
    matrices and the sums of at most ``fuzziness_open_classes`` open classes (those of
    two rows or more) in host memory, a PR table as output (a shard: every statistic,
    with ``statistics_written``)."""
    width = size.hidden_size + len(offsets) * len(controls)
    statistics_flops = 2 * width * width * (size.num_layers * len(norms) + 1)
    rows = (size.num_layers + 1) * len(offsets) * len(norms) * len(controls)
    device_bytes = statistics_bytes(size, offsets, norms, controls) + fuzziness_bytes(size, norms)
    host_bytes = class_sums_bytes(size, norms, fuzziness_open_classes)
    return model_pass_needs(
        size=size,
        dtype=dtype,
        n_tokens=n_tokens,
        batch_tokens=batch_tokens,
        on_gpu=on_gpu,
        gpus=gpus,
        gpu_memory_gb=gpu_memory_gb,
        device_bytes=device_bytes,
        host_bytes=host_bytes,
        flops_per_token=statistics_flops,
        output_bytes=device_bytes + host_bytes if statistics_written else rows * 64,
        quantization=quantization,
    )


def fuzziness_bytes(size: ModelSize, norms: Sequence[str]) -> int:
    """Device memory of the separation-fuzziness statistics: per layer and norm (the last
    layer once) a float64 co-moment of the hidden size."""
    width = size.hidden_size
    return (size.num_layers * len(norms) + 1) * (width * width + width) * 8


def class_sums_bytes(size: ModelSize, norms: Sequence[str], open_classes: int) -> int:
    """Host memory of the separation fuzziness's CPU statistics (float64), per layer and
    norm (the last layer once): the sums of at most ``open_classes`` open classes (the
    classes of two rows or more; a class is folded and freed once its rows are seen) and
    the folded matrix Σ_c t_c t_cᵀ / n_c and reference, hidden size² + hidden size. The
    per-layer bookkeeping (16 bytes per class) is left out."""
    width = size.hidden_size
    per_layer_norm = open_classes * width + width * width + width
    return (size.num_layers * len(norms) + 1) * per_layer_norm * 8


def hidden_states_bytes(size: ModelSize, n_tokens: int, storage_bytes: int) -> int:
    """Disk of every layer's states of ``n_tokens`` tokens."""
    return n_tokens * (size.num_layers + 1) * size.hidden_size * storage_bytes


def training_needs(
    parameters: int,
    vocab_size: int,
    batch_tokens: int,
    steps: int,
    checkpoints: int,
    on_gpu: bool,
) -> Needs:
    """Needs of training a model of ``parameters`` from scratch in float32 with AdamW
    (weights, gradients, two moments), ``steps`` batches of ``batch_tokens`` tokens whose
    logits (``vocab_size`` each) dominate the activations, saving ``checkpoints``
    checkpoints (and one optimizer state)."""
    device_bytes = 16 * parameters + 3 * batch_tokens * vocab_size * 4
    seconds = 6 * parameters * batch_tokens * steps / FLOPS_PER_SECOND["gpu" if on_gpu else "cpu"]
    host = HOST_BASE_MB * MIB + (4 * parameters if on_gpu else device_bytes)
    return Needs(
        gpu=1 if on_gpu else 0,
        gpu_mb=math.ceil(device_bytes / MIB) if on_gpu else 0,
        mem_mb=math.ceil(host / MIB),
        disk_mb=max(1, math.ceil((checkpoints + 2) * 4 * parameters / MIB)),
        runtime=max(10, math.ceil(2 * seconds / 60) + 5),
    )
