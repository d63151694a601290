"""Which items a shard of a job takes, and how a job of a stage split into shards runs
(``coupling.shards``, ``equilearning.shards``): the equi-learning pass and the coupling
run the same way."""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, TypeVar

if TYPE_CHECKING:
    from layerlaws.core.progress import ProgressSaves

log = logging.getLogger("layerlaws")
Measured = TypeVar("Measured")


@dataclass(frozen=True)
class Sharding:
    """How a stage's model jobs are split: into ``shards`` jobs each (``equilearning.shards``,
    ``coupling.shards``; 1: not split), each shard's job writing a file the stage's own job
    merges."""

    shards: int = 1

    @property
    def split(self) -> bool:
        """Whether the stage's jobs are split into shard jobs."""
        return self.shards > 1

    def share(self, count: int) -> int:
        """The most items of ``count`` one shard's job takes (all of them when not split)."""
        return -(-count // self.shards)

    def files(self, shard_file: Callable[[str], str]) -> list[str]:
        """The shard jobs' files (``shard_file`` of each shard's number), none when not
        split: what the stage's own job merges."""
        return [shard_file(str(shard)) for shard in range(self.shards)] if self.split else []

    def jobs(self, rule: str, data: str) -> list[tuple[str, str, dict[str, str]]]:
        """(rule, data, shard wildcard) of each model job of one run on ``data``: the stage's
        ``rule`` once (no wildcard), or its shard rule (``<rule>_shard``) once per shard,
        the data labelled ``<data>[<shard>/<shards>]``, the wildcard ``{"shard": "<shard>"}``."""
        if not self.split:
            return [(rule, data, {})]
        return [
            (f"{rule}_shard", f"{data}[{shard}/{self.shards}]", {"shard": str(shard)})
            for shard in range(self.shards)
        ]


def shard_indices(count: int, shard: int, shards: int) -> range:
    """The indices of shard ``shard`` (0-based) of ``shards`` among ``count`` items (prompts,
    or sequences in order of first appearance): every ``shards``-th from ``shard`` on, so
    that the shards' sizes differ by one at most and each holds items from the whole
    list (long and short, early and late)."""
    return range(shard, count, shards)


@dataclass(frozen=True)
class ShardedJob:
    """One job of a stage split into ``shards``: shard ``shard`` (0-based) of the items,
    or, with ``shard`` None, the stage's own job, which measures every item or, given the
    shard jobs' files ``shard_files``, merges them."""

    shards: int
    shard: int | None = None
    shard_files: tuple[str, ...] = ()

    @classmethod
    def of(cls, shards: int, wildcards: Mapping[str, Any], inputs: Any) -> ShardedJob:
        """The job of a rule's ``wildcards`` (a shard job's hold ``shard``) and named
        ``inputs`` (the merging job's hold ``shards``, the shard jobs' files)."""
        shard = wildcards.get("shard")
        files = tuple(str(path) for path in getattr(inputs, "shards", ()))
        return cls(shards, None if shard is None else int(shard), files)

    def indices(self, count: int) -> range:
        """The items of ``count`` this job measures."""
        return range(count) if self.shard is None else shard_indices(count, self.shard, self.shards)

    def described(self) -> str:
        """``"; shard 1 of 4"`` for a shard job (its 0-based number, as its file's), else
        nothing: for log lines."""
        return "" if self.shard is None else f"; shard {self.shard} of {self.shards}"

    def run(
        self,
        count: int,
        *,
        saves: Callable[[], ProgressSaves],
        measure: Callable[[range, ProgressSaves], Measured],
        merge: Callable[[Sequence[str]], Measured],
        write_shard: Callable[[Measured], None],
        write_outputs: Callable[[Measured, ProgressSaves | None], None],
        written: Callable[[Measured], None] = lambda _: None,
    ) -> None:
        """Run the job over ``count`` items: ``merge`` the shard files, or ``measure`` this
        job's items resuming from and saving to ``saves()``; then ``write_shard`` (a shard
        job) or ``write_outputs`` (given the saves, None after a merge). Once written, a
        job that measured calls ``written`` (to remove what it kept to resume) and
        removes its progress save."""
        progress = None
        if self.shard_files:
            measured = merge(self.shard_files)
        else:
            progress = saves()
            measured = measure(self.indices(count), progress)
        if self.shard is None:
            write_outputs(measured, progress)
        else:
            write_shard(measured)
        if progress is not None:
            written(measured)
            log.info("progress saves: %s", progress.finish())
