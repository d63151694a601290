"""Device claiming: each GPU job takes one free GPU for its lifetime.

Snakemake's ``--resources gpu=N`` only caps how many ``gpu=1`` jobs run at once; it never
says which GPU a job should use. Each job therefore claims one device itself, with one
non-blocking ``flock`` per device slot in a folder shared by the jobs of one machine. A
``CUDA_VISIBLE_DEVICES`` that is already set (SLURM sets it) is honoured: only the devices
it lists are candidates, and locks are named by the ids it gives.
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

from layerlaws.errors import LayerlawsError

log = logging.getLogger(__name__)

DEVICE_CHOICES = ("auto", "cpu", "cuda")
DEFAULT_LOCK_DIR = "/tmp/layerlaws-device-locks"


@dataclass(frozen=True)
class DeviceClaim:
    """The device a job runs on."""

    device: str
    """A torch device string: ``cpu`` or ``cuda:<index among the visible devices>``."""
    gpu_id: str | None
    """The GPU's id as the machine names it (an entry of CUDA_VISIBLE_DEVICES), or None."""

    def describe(self) -> str:
        if self.gpu_id is None:
            return "cpu"
        return f"{self.device} (GPU id {self.gpu_id})"


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


@contextmanager
def claim_device(
    requested: str,
    lock_dir: str | os.PathLike[str] = DEFAULT_LOCK_DIR,
    gpu_ids: list[str] | None = None,
    poll_seconds: float = 2.0,
) -> Iterator[DeviceClaim]:
    """Claim a device for the duration of the ``with`` block.

    ``requested`` is ``auto`` (a free GPU if any is visible, else the CPU), ``cpu`` or
    ``cuda`` (a GPU, or LayerlawsError when none is visible). ``gpu_ids`` overrides the
    visible GPUs (tests use it to simulate several). When every GPU is held by another
    job, waits, logging once, until one is released.
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
        yield DeviceClaim("cpu", None)
        return
    folder = Path(lock_dir)
    folder.mkdir(parents=True, exist_ok=True)
    waited = False
    while True:
        for index, gpu_id in enumerate(candidates):
            lock_name = "gpu-" + re.sub(r"[^A-Za-z0-9_.-]", "_", gpu_id) + ".lock"
            descriptor = _try_lock(folder / lock_name)
            if descriptor is None:
                continue
            try:
                yield DeviceClaim(f"cuda:{index}", gpu_id)
            finally:
                fcntl.flock(descriptor, fcntl.LOCK_UN)
                os.close(descriptor)
            return
        if not waited:
            log.warning(
                "all %d GPUs (%s) are claimed by other jobs; waiting for one",
                len(candidates),
                ",".join(candidates),
            )
            waited = True
        time.sleep(poll_seconds)
