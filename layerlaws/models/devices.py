"""Device claiming: each GPU job takes the free GPUs it needs for its lifetime.

Snakemake's ``--resources gpu=N`` only caps how many GPUs the running jobs ask for
together; it never says which GPUs a job should use. Each job therefore claims its devices
itself, with one non-blocking ``flock`` per device slot in a folder shared by the jobs of
one machine. A job that needs several GPUs claims them all or none: it takes what is free,
and when that is not enough it releases everything and waits, so two jobs never hold part
of what each other needs (no deadlock). A ``CUDA_VISIBLE_DEVICES`` that is already set
(SLURM sets it) is honoured: only the devices it lists are candidates, and locks are named
by the ids it gives.
"""

from __future__ import annotations

import fcntl
import logging
import os
import re
import time
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from layerlaws.core.errors import LayerlawsError

log = logging.getLogger(__name__)

DEVICE_CHOICES = ("auto", "cpu", "cuda")
DEFAULT_LOCK_DIR = "/tmp/layerlaws-device-locks"


@dataclass(frozen=True)
class DeviceClaim:
    """The devices a job runs on."""

    devices: tuple[str, ...]
    """Torch device strings: ``("cpu",)`` or ``("cuda:<index among the visible devices>", …)``."""
    gpu_ids: tuple[str, ...]
    """The GPUs' ids as the machine names them (entries of CUDA_VISIBLE_DEVICES); () on CPU."""

    @property
    def device(self) -> str:
        """Where a job's inputs go: the first device."""
        return self.devices[0]

    def describe(self) -> str:
        if not self.gpu_ids:
            return "cpu"
        return ", ".join(
            f"{device} (GPU id {gpu_id})"
            for device, gpu_id in zip(self.devices, self.gpu_ids, strict=True)
        )


def visible_gpu_ids(
    environ: Mapping[str, str] | None = None, device_count: int | None = None
) -> list[str]:
    """Ids of the GPUs this process may use, in torch's index order.

    ``device_count`` is what torch reports (asked when None); ``environ`` defaults to the
    process environment, whose CUDA_VISIBLE_DEVICES (when set) names the devices.
    """
    if device_count is None:
        import torch

        device_count = torch.cuda.device_count() if torch.cuda.is_available() else 0
    preset = (os.environ if environ is None else environ).get("CUDA_VISIBLE_DEVICES")
    if preset is None:
        return [str(index) for index in range(device_count)]
    ids = [entry.strip() for entry in preset.split(",") if entry.strip()]
    return ids[:device_count]


def _try_lock(path: Path) -> int | None:
    descriptor = os.open(path, os.O_RDWR | os.O_CREAT, 0o666)
    try:
        fcntl.flock(descriptor, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        os.close(descriptor)
        return None
    os.ftruncate(descriptor, 0)
    os.write(descriptor, f"{os.getpid()}\n".encode())
    return descriptor


def _release(descriptors: list[int]) -> None:
    for descriptor in descriptors:
        fcntl.flock(descriptor, fcntl.LOCK_UN)
        os.close(descriptor)


def _lock_name(gpu_id: str) -> str:
    return "gpu-" + re.sub(r"[^A-Za-z0-9_.-]", "_", gpu_id) + ".lock"


@contextmanager
def claim_devices(
    requested: str,
    lock_dir: str | os.PathLike[str] = DEFAULT_LOCK_DIR,
    count: int = 1,
    gpu_ids: list[str] | None = None,
    poll_seconds: float = 2.0,
) -> Iterator[DeviceClaim]:
    """Claim ``count`` GPUs (all or none) for the duration of the ``with`` block.

    ``requested`` is ``auto`` (free GPUs if any are visible, else the CPU), ``cpu`` or
    ``cuda`` (GPUs, or a LayerlawsError when none is visible). ``gpu_ids`` overrides the
    visible GPUs (tests use it to simulate several). When fewer than ``count`` GPUs are
    free, holds none of them and waits, logging once, until enough are; more than are
    visible is a LayerlawsError.
    """
    if requested not in DEVICE_CHOICES:
        raise LayerlawsError(
            f"execution.device is {requested!r}; allowed values: {list(DEVICE_CHOICES)}"
        )
    candidates = [] if requested == "cpu" else (visible_gpu_ids() if gpu_ids is None else gpu_ids)
    if not candidates:
        if requested == "cuda":
            raise LayerlawsError(
                "execution.device is 'cuda' but no CUDA device is visible to this job "
                f"(CUDA_VISIBLE_DEVICES={os.environ.get('CUDA_VISIBLE_DEVICES')!r}). Run on a "
                "GPU node, or set execution.device to 'auto' or 'cpu' in the config."
            )
        yield DeviceClaim(("cpu",), ())
        return
    if count > len(candidates):
        raise LayerlawsError(
            f"this job needs {count} GPUs but only {len(candidates)} are visible "
            f"({','.join(candidates)}); run it where {count} GPUs are, or give the model "
            f"fewer (models.<key>.gpus), e.g. in bfloat16"
        )
    folder = Path(lock_dir)
    folder.mkdir(parents=True, exist_ok=True)
    waited = False
    while True:
        held: list[tuple[int, int]] = []
        for index, gpu_id in enumerate(candidates):
            descriptor = _try_lock(folder / _lock_name(gpu_id))
            if descriptor is not None:
                held.append((index, descriptor))
                if len(held) == count:
                    break
        if len(held) == count:
            break
        _release([descriptor for _, descriptor in held])
        if not waited:
            log.warning(
                "fewer than %d of the %d GPUs (%s) are free; waiting",
                count,
                len(candidates),
                ",".join(candidates),
            )
            waited = True
        time.sleep(poll_seconds)
    try:
        yield DeviceClaim(
            tuple(f"cuda:{index}" for index, _ in held),
            tuple(candidates[index] for index, _ in held),
        )
    finally:
        _release([descriptor for _, descriptor in held])


@dataclass(frozen=True)
class DeviceRequest:
    """What a job claims: ``device`` (``auto``, ``cpu`` or ``cuda``; ``execution.device``),
    ``gpus`` of them, through the locks in ``lock_dir``."""

    device: str
    lock_dir: str
    gpus: int

    def claim(self) -> Any:
        """``claim_devices`` of this request: a context manager yielding the DeviceClaim."""
        return claim_devices(self.device, self.lock_dir, self.gpus)
