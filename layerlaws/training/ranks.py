"""The processes of a data-parallel training (``torch.distributed``): which one this is,
and the few collective steps the training loop takes (``train.train``).

One process (``SINGLE``) takes none of them, so a training of one process runs exactly as
it did before data parallelism. Under ``torchrun`` each process is one rank of a process
group (NCCL between GPUs, gloo between CPU processes), its model wrapped in
DistributedDataParallel, which averages the gradients over the ranks during the backward
pass; rank 0 alone evaluates, logs and saves.
"""

from __future__ import annotations

from contextlib import nullcontext
from dataclasses import dataclass
from typing import Any

import torch


@dataclass(frozen=True)
class Ranks:
    """This process's ``rank`` among ``size`` processes of a data-parallel training."""

    rank: int = 0
    size: int = 1

    @classmethod
    def of_group(cls) -> Ranks:
        """The ranks of the initialised default process group; ``SINGLE`` without one."""
        if not torch.distributed.is_initialized():
            return SINGLE
        return cls(torch.distributed.get_rank(), torch.distributed.get_world_size())

    @property
    def first(self) -> bool:
        """Whether this is rank 0, the one that evaluates, logs and saves."""
        return self.rank == 0

    def wrap(self, model: torch.nn.Module, device: str) -> torch.nn.Module:
        """What the forward and backward passes run through: ``model`` itself on one
        process; else DistributedDataParallel over it (the gradients averaged over the
        ranks in the backward pass)."""
        if self.size == 1:
            return model
        devices = [torch.device(device).index] if device.startswith("cuda") else None
        return torch.nn.parallel.DistributedDataParallel(model, device_ids=devices)

    def holding_gradients(self, wrapped: torch.nn.Module, last: bool) -> Any:
        """The context of a backward pass that is not the ``last`` of a step: the
        gradients accumulate locally, and only the last pass's all-reduce sums them."""
        return wrapped.no_sync() if self.size > 1 and not last else nullcontext()

    def mean(self, values: torch.Tensor) -> torch.Tensor:
        """The mean over the ranks of ``values`` (every rank's own); ``values`` itself on
        one process."""
        if self.size == 1:
            return values
        summed = values.clone()
        torch.distributed.all_reduce(summed)
        return summed / self.size

    def from_first(self, value: Any) -> Any:
        """Rank 0's ``value`` (any picklable object), on every rank."""
        if self.size == 1:
            return value
        box = [value]
        torch.distributed.broadcast_object_list(box, src=0)
        return box[0]

    def wait(self) -> None:
        """Every rank waits here for the others (rank 0's saves are on disk after it)."""
        if self.size > 1:
            torch.distributed.barrier()


SINGLE = Ranks()
"""A training of one process."""
