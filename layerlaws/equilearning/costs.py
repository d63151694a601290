"""What the equi-learning pass needs (torch-free): the memory of its statistics, exact, what
its named observers declare (``layerlaws.forward.observers``), and the needs of the whole
job (``layerlaws.forward.costs``), from the model's size and the stage's settings alone."""

from __future__ import annotations

import math
from collections.abc import Sequence

from layerlaws.core.dtypes import DTYPE_BYTES
from layerlaws.forward.costs import ModelSize, Needs, model_pass_needs
from layerlaws.forward.observers import ObserverSpec

MAX_BLOCKS = 64
"""The open class sums of a layer and norm are held in at most this many blocks."""
SUM_BYTES = 8
"""Bytes of one element of a class sum (float64)."""


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
    fuzziness_host_bytes: int | None = None,
    statistics_written: bool = False,
    quantization: str = "none",
    named: Sequence[ObserverSpec] = (),
    tokens_per_text: int = 1,
) -> Needs:
    """Needs of the equi-learning pass: the model, its statistics on the device (the
    co-moments of the separation fuzziness included) and what its ``named`` observers
    declare for texts of ``tokens_per_text`` tokens (``named_needs``), the separation
    fuzziness's folded matrices and the sums of at most ``fuzziness_open_classes`` open
    classes (those of two rows or more) in host memory up to ``fuzziness_host_bytes``
    (None: all), the rest on the job's scratch disk (``spilled_sums_bytes``), a PR table
    as output (a shard: every statistic, with ``statistics_written``)."""
    width = size.hidden_size + len(offsets) * len(controls)
    named_bytes, named_flops = named_needs(
        named, size=size, batch_tokens=batch_tokens, dtype=dtype, tokens_per_text=tokens_per_text
    )
    statistics_flops = 2 * width * width * (size.num_layers * len(norms) + 1) + named_flops
    rows = (size.num_layers + 1) * len(offsets) * len(norms) * len(controls)
    device_bytes = statistics_bytes(size, offsets, norms, controls) + fuzziness_bytes(size, norms)
    device_bytes += named_bytes
    held = slots_in_memory(fuzziness_host_bytes, size.hidden_size, layer_norms(size, norms))
    in_memory = fuzziness_open_classes if held is None else min(fuzziness_open_classes, held)
    host_bytes = class_sums_bytes(size, norms, in_memory)
    spilled = spilled_sums_bytes(size, norms, fuzziness_open_classes, held)
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
        output_bytes=device_bytes + host_bytes + spilled if statistics_written else rows * 64,
        scratch_bytes=spilled,
        quantization=quantization,
    )


def fuzziness_bytes(size: ModelSize, norms: Sequence[str]) -> int:
    """Device memory of the separation-fuzziness statistics: per layer and norm (the last
    layer once) a float64 co-moment of the hidden size."""
    width = size.hidden_size
    return layer_norms(size, norms) * (width * width + width) * SUM_BYTES


def layer_norms(size: ModelSize, norms: Sequence[str]) -> int:
    """Layers × norms of the separation fuzziness (the last layer once)."""
    return size.num_layers * len(norms) + 1


def sums_per_block(n_slots: int) -> int:
    """Class sums per block of one layer and norm's ``n_slots`` open class sums."""
    return max(1, math.ceil(n_slots / MAX_BLOCKS))


def slots_in_memory(host_bytes: int | None, width: int, layer_norms: int) -> int | None:
    """Open class sums of ``width`` one layer and norm holds in host memory when the
    ``layer_norms`` share ``host_bytes`` (None: no limit)."""
    return None if host_bytes is None else host_bytes // (layer_norms * width * SUM_BYTES)


def blocks_in_memory(n_slots: int, held: int | None) -> int:
    """Blocks of ``n_slots`` open class sums held in host memory, the first ones: those
    that end within the first ``held`` sums (None: all); the rest are spilled to disk."""
    block = sums_per_block(n_slots)
    if held is None or held >= n_slots:
        return math.ceil(n_slots / block)
    return held // block


def spilled_sums_bytes(
    size: ModelSize, norms: Sequence[str], open_classes: int, held: int | None
) -> int:
    """Scratch disk of the open class sums of a pass whose classes of two rows or more
    are at most ``open_classes``, each layer and norm holding ``held`` in host memory
    (None: all): the blocks beyond them (``blocks_in_memory``), at most one block more
    than the sums beyond ``held``, whatever the number of open classes the tokens give."""
    if held is None or open_classes <= held:
        return 0
    spilled = min(open_classes, open_classes - held + sums_per_block(open_classes) - 1)
    return layer_norms(size, norms) * spilled * size.hidden_size * SUM_BYTES


def class_sums_bytes(size: ModelSize, norms: Sequence[str], open_classes: int) -> int:
    """Host memory of the separation fuzziness's CPU statistics (float64), per layer and
    norm (the last layer once): the sums of at most ``open_classes`` open classes (the
    classes of two rows or more; a class is folded and freed once its rows are seen) and
    the folded matrix Σ_c t_c t_cᵀ / n_c and reference, hidden size² + hidden size. The
    per-layer bookkeeping (16 bytes per class) is left out."""
    width = size.hidden_size
    per_layer_norm = open_classes * width + width * width + width
    return layer_norms(size, norms) * per_layer_norm * SUM_BYTES


def named_needs(
    named: Sequence[ObserverSpec],
    *,
    size: ModelSize,
    batch_tokens: int,
    dtype: str,
    tokens_per_text: int,
) -> tuple[int, float]:
    """(bytes on the devices, float64 operations per token) of the ``named`` observers of a
    pass over batches of ``batch_tokens`` tokens in ``dtype``, summed over what each
    declares (``ObserverSpec.needs``)."""
    needs = [
        spec.needs(
            hidden_size=size.hidden_size,
            num_layers=size.num_layers,
            batch_tokens=batch_tokens,
            dtype_bytes=DTYPE_BYTES[dtype],
            tokens_per_text=tokens_per_text,
        )
        for spec in named
    ]
    return sum(bytes_ for bytes_, _ in needs), sum(flops for _, flops in needs)
