"""What a job that runs a model needs, from the model's size, its dtype and the tokens it
runs over alone (no weights, no torch): GPUs and their memory, host memory, disk for its
outputs, runtime.

The stages' cost models (``layerlaws.equilearning.costs``, ``layerlaws.coupling.costs``,
``layerlaws.training.costs``) build on it; the workflow's planner
(``layerlaws.pipeline.planning``) declares their needs as the rules' resources, so
``--resources gpu=N`` and SLURM count them (a profile can still override them), and
``snakemake estimate`` prints them for a config before anything runs. The numbers are
deliberately generous estimates.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from typing import Any

from layerlaws.core.dtypes import DTYPE_BYTES
from layerlaws.core.errors import LayerlawsError
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
SCRATCH_BYTES_PER_SECOND = 2e9
"""Assumed speed of a job's local scratch disk (an NVMe drive), each way."""

log = logging.getLogger(__name__)


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
    decoder_layers: int | None = field(default=None, compare=False)
    """An encoder–decoder's decoder blocks L_d (``num_layers`` counts both stacks' blocks,
    L_e + L_d); 0 for a model of one stack; None where not known."""
    encoder_parameters: int | None = field(default=None, compare=False)
    """An encoder–decoder's encoder's parameters (its token embeddings, shared with the
    decoder, its blocks and final norm: transformers' ``T5EncoderModel``); 0 for a model
    of one stack; None where not known."""

    @classmethod
    def of(cls, facts: Mapping[str, Any]) -> ModelSize:
        """From a prepared model's facts, or a ``models.<key>.size`` entry of a config; a
        LayerlawsError where an encoder–decoder's stacks do not fit in the whole."""
        size = cls(
            int(facts["parameters"]),
            int(facts["num_layers"]),
            int(facts["hidden_size"]),
            int(facts["vocab_size"]),
            facts.get("model_type"),
            facts.get("decoder_layers"),
            facts.get("encoder_parameters"),
        )
        if size.decoder_layers and not (
            size.decoder_layers < size.num_layers
            and (size.encoder_parameters or 0) < size.parameters
        ):
            raise LayerlawsError(
                f"an encoder-decoder's size counts both stacks: decoder_layers "
                f"({size.decoder_layers}) must be fewer than num_layers ({size.num_layers}) "
                f"and encoder_parameters ({size.encoder_parameters}) fewer than parameters "
                f"({size.parameters})"
            )
        return size

    def running(self, stack: str) -> ModelSize:
        """The size a pass that regresses the layers of ``stack`` (``LayerChoice.stack``)
        runs and regresses: an encoder–decoder's encoder alone (``encoder``: its L_e blocks
        and parameters, as it runs without the decoder), its decoder's L_d blocks with the
        whole model's parameters (``decoder``: the whole model runs, its decoder read), or
        this size (``both``, a model of one stack). Where this size does not say how an
        encoder–decoder divides (facts prepared before ``decoder_layers`` and
        ``encoder_parameters`` were recorded, a ``models.<key>.size`` without them), this
        size: the whole model's, both stacks' layers."""
        if stack == "both" or self.decoder_layers == 0:
            return self
        if self.decoder_layers is None or (stack == "encoder" and self.encoder_parameters is None):
            log.debug(
                "a size that does not say how an encoder-decoder divides (decoder_layers, "
                "encoder_parameters): a pass of its %s planned as the whole model's",
                stack,
            )
            return self
        if stack == "decoder":
            return replace(self, num_layers=self.decoder_layers)
        return replace(
            self,
            parameters=self.encoder_parameters,
            num_layers=self.num_layers - self.decoder_layers,
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
    """Disk for the job's outputs and its scratch files, MiB."""
    runtime: int
    """Minutes."""
    scratch_mb: int = 0
    """Of ``disk_mb``, the local scratch disk the job uses while it runs and frees, MiB."""

    @property
    def outputs_mb(self) -> int:
        """Disk of the job's outputs, MiB."""
        return self.disk_mb - self.scratch_mb


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
    scratch_bytes: int = 0,
    quantization: str = "none",
) -> Needs:
    """Needs of a job that runs a model (in ``dtype``, its weights under ``quantization``)
    over ``n_tokens`` tokens in batches of about
    ``batch_tokens``, holding ``device_bytes`` more beside it (statistics) and
    ``host_bytes`` in host memory wherever it runs, doing ``flops_per_token`` of float64
    work beside the forward pass, writing ``output_bytes`` and keeping ``scratch_bytes``
    on its local scratch disk while it runs (written and read back once, at least).

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
    seconds += weights / LOAD_BYTES_PER_SECOND + 2 * scratch_bytes / SCRATCH_BYTES_PER_SECOND
    return Needs(
        gpu=count,
        gpu_mb=gpu_mb,
        mem_mb=math.ceil(host / MIB),
        disk_mb=max(1, math.ceil(output_bytes / MIB)) + math.ceil(scratch_bytes / MIB),
        runtime=max(10, math.ceil(2 * seconds / 60) + 5),
        scratch_mb=math.ceil(scratch_bytes / MIB),
    )


def hidden_states_bytes(size: ModelSize, n_tokens: int, storage_bytes: int) -> int:
    """Disk of every layer's states of ``n_tokens`` tokens."""
    return n_tokens * (size.num_layers + 1) * size.hidden_size * storage_bytes
