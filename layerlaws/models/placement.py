"""Where a model's weights go: one device, or its blocks spread over several GPUs.

A model larger than one GPU is spread with a device map (loaded by accelerate): its blocks
whole and in order, filling the devices one after the other, each within a budget. The
plan is made on a skeleton of the model (its modules on the meta device, no weights), so a
model that cannot fit the devices claimed stops with a message before anything is loaded.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any

import torch

from layerlaws.core.errors import LayerlawsError
from layerlaws.models.architectures import block_paths
from layerlaws.models.quantization import WEIGHT_BYTES

WEIGHTS_SHARE = 0.7
"""Share of a GPU's free memory its weights may take (the rest: activations, statistics)."""


def device_budgets(devices: Sequence[str]) -> dict[str, int]:
    """Bytes of weights each GPU may take: WEIGHTS_SHARE of its free memory."""
    return {
        device: int(torch.cuda.mem_get_info(torch.device(device))[0] * WEIGHTS_SHARE)
        for device in devices
    }


SMALLER = (
    "give it more GPUs (models.<key>.gpus), run it in bfloat16 (models.<key>.dtype) or "
    "quantised (models.<key>.quantization: nf4)"
)


def tensor_bytes(skeleton: Any, dtype: torch.dtype, quantization: str = "none") -> dict[str, int]:
    """Bytes of each parameter and buffer of ``skeleton`` in ``dtype``; under a
    ``quantization``, the weights of its linear layers but the output embeddings at
    ``WEIGHT_BYTES`` each (``layerlaws.models.quantization``)."""
    quantized = set()
    if quantization != "none":
        output = skeleton.get_output_embeddings()
        quantized = {
            f"{name}.weight"
            for name, module in skeleton.named_modules()
            if isinstance(module, torch.nn.Linear) and module is not output
        }
    return {
        name: math.ceil(tensor.numel() * WEIGHT_BYTES[quantization])
        if name in quantized
        else tensor.numel() * dtype.itemsize
        for name, tensor in [*skeleton.named_parameters(), *skeleton.named_buffers()]
    }


def device_map(
    skeleton: Any, dtype: torch.dtype, budgets: Mapping[str, int], quantization: str = "none"
) -> dict[str, str]:
    """Module name → device, for ``skeleton`` (its weights in ``dtype``, or under
    ``quantization``) spread over the devices of ``budgets`` (bytes of weights each, in
    order): the blocks whole and in order, about an equal share on each device; everything
    else (embeddings, final norm, LM head) on the first device. A LayerlawsError when they
    do not fit."""
    devices, left = list(budgets), dict(budgets)
    blocks = block_paths(skeleton)
    sizes = dict.fromkeys(blocks, 0)
    rest: dict[str, int] = {}
    for name, size in tensor_bytes(skeleton, dtype, quantization).items():
        block = next((b for b in blocks if name.startswith(b + ".")), None)
        module = block or name.rpartition(".")[0]
        share = sizes if block else rest
        share[module] = share.get(module, 0) + size
    left[devices[0]] -= sum(rest.values())
    plan = dict.fromkeys(rest, devices[0])
    # Balanced: a device takes blocks up to an equal share of them (its statistics and
    # working memory follow its layers), within its budget.
    share = (sum(sizes.values()) + sum(rest.values())) / len(devices) + max(sizes.values())
    taken = dict.fromkeys(devices, 0) | {devices[0]: sum(rest.values())}
    where = 0
    for block in blocks:
        while where < len(devices) and (
            sizes[block] > left[devices[where]]
            or (where < len(devices) - 1 and taken[devices[where]] + sizes[block] > share)
        ):
            where += 1
        if where == len(devices) or left[devices[0]] < 0:
            total = sum(budgets.values()) / 2**30
            raise LayerlawsError(
                f"the model does not fit the {len(devices)} device(s) claimed "
                f"({', '.join(devices)}, {total:.1f} GiB for weights); {SMALLER}"
            )
        plan[block] = devices[where]
        left[devices[where]] -= sizes[block]
        taken[devices[where]] += sizes[block]
    return plan


def weights_bytes(skeleton: Any, dtype: torch.dtype, quantization: str = "none") -> int:
    """Bytes the weights of ``skeleton`` take in ``dtype`` (under ``quantization``)."""
    return sum(tensor_bytes(skeleton, dtype, quantization).values())


def check_fits(skeleton: Any, dtype: torch.dtype, device: str, quantization: str = "none") -> None:
    """A LayerlawsError, before loading, when the weights alone exceed a GPU's budget."""
    if not device.startswith("cuda"):
        return
    needed = weights_bytes(skeleton, dtype, quantization)
    budget = device_budgets([device])[device]
    if needed > budget:
        described = dtype if quantization == "none" else f"{quantization} and {dtype}"
        raise LayerlawsError(
            f"the model's weights take {needed / 2**30:.1f} GiB in {described}, more than "
            f"{budget / 2**30:.1f} GiB of {device}; {SMALLER}"
        )
