"""A model pass split into shards: each shard runs the pass over every N-th sequence of
the tokens table as a job of its own (its own device claim and progress saves) and writes
what its observers merged; one job then merges the shards' observers into observers
built as for the whole pass, which write the tables one job writes.

Every observer's statistics add: co-moments (float64, Chan, Golub & LeVeque's pairwise
update), the fuzziness class sums (moved to one reference), the held-out evaluation's
sums and the token views' kept rows. The tables equal the one-job pass's within float64
rounding (the sums are added in another order), the kept states bit for bit.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import torch

from layerlaws.core.atomic import atomic_path
from layerlaws.core.errors import LayerlawsError
from layerlaws.forward.model_pass import LogitObserver, Observer, progress_of, restore

log = logging.getLogger(__name__)

Observers = Sequence[Observer | LogitObserver]


def write_pass_shard(path: str | Path, observers: Observers, report: dict[str, Any]) -> None:
    """What a shard's ``observers`` merged and its pass's report, written atomically."""
    state = {"observers": [progress_of(observer) for observer in observers], "report": report}
    with atomic_path(path) as temporary:
        torch.save(state, temporary)


def merge_pass_shards(
    paths: Sequence[str | Path], observers: Observers, built: Callable[[], Observers]
) -> dict[str, Any]:
    """Merge the shards written at ``paths`` into ``observers`` (built as for the whole
    pass; ``built()`` makes another such list, which each shard's state is restored into
    before it is merged), on the CPU. Returns the merged report: rows, sequences and
    tokens summed, ``seconds`` the shards' seconds summed (device-seconds), ``shards``."""
    reports = []
    for path in paths:
        try:
            state = torch.load(path, map_location="cpu", weights_only=False)
            progress, report = state["observers"], state["report"]
        except Exception as error:
            raise LayerlawsError(
                f"cannot read the pass shard {path} ({error}); delete it and rerun: "
                f"Snakemake runs that shard again"
            ) from None
        shard = built()
        if len(progress) != len(shard):
            raise LayerlawsError(
                f"the pass shard {path} holds {len(progress)} observers, not {len(shard)}; "
                f"delete it and rerun"
            )
        for observer, merged, attributes in zip(observers, shard, progress, strict=True):
            restore(merged, attributes)
            observer.merge_(merged)
        reports.append(report)
        log.info("merged the pass shard %s (%d rows)", path, report["n_rows"])
    return merged_report(reports)


def merged_report(reports: Sequence[dict[str, Any]]) -> dict[str, Any]:
    """One report of the shards' ``reports`` (``run_forward_pass``'s)."""
    summed = {
        name: sum(report[name] for report in reports)
        for name in ("n_rows", "n_sequences", "n_tokens", "out_of_memory_retries")
    }
    seconds = sum(report["seconds"] for report in reports)
    return {
        **reports[0],
        **summed,
        "seconds": round(seconds, 3),
        "tokens_per_second": round(summed["n_tokens"] / seconds, 1) if seconds > 0 else None,
        "batches_resumed": sum(report["batches_resumed"] for report in reports),
        "shards": len(reports),
    }
