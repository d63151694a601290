"""Benchmark: our streamed PR statistics against the reference code's method, on kept
hidden states.

Ours: ``EquilearningStatistics`` (the observer of the equi-learning pass: float64
co-moments merged chunk by chunk, one shared co-moment per layer for all targets), fed the
kept states in chunks of whole sequences of about 4096 rows, as batches of the pass would
be. Baseline (the paper's code): one scikit-learn ``LinearRegression`` per layer and target
on float32 arrays held in memory, PR = 1 − R². Both use the ``model`` normalisation and
the same rows. Reference: float64 ``numpy.linalg.lstsq`` on the same rows, centred.

Times are the best of two runs, without allocation tracing; peak memory is the peak of
Python-visible allocations (tracemalloc; NumPy reports its arrays) in a separate, traced
run of each (torch's float64 co-moments of ours are counted by hand and added).

Usage (after `make run`; the states are kept on request):
    .venv/bin/snakemake --cores 2 results/hidden/smollm2-135m/wiki-science
    .venv/bin/python bench/regression.py [results/hidden/smollm2-135m/wiki-science]
"""

from __future__ import annotations

import sys
import time
import tracemalloc
from pathlib import Path

import numpy as np
import polars as pl
import torch
from sklearn.linear_model import LinearRegression

from layerlaws.equilearning.norms import normalize
from layerlaws.equilearning.regression import DEFAULT_CUTOFF
from layerlaws.equilearning.statistics import EquilearningStatistics, target_matrix
from layerlaws.forward.kept_states import HiddenStates
from layerlaws.models.facts import ModelFacts

OFFSETS = [-1, 0, 1, 2]
DEFAULT = "results/hidden/smollm2-135m/wiki-science"
CHUNK_ROWS = 4096


def timed(function, *args, repeats: int = 2):
    """(result, best seconds of ``repeats`` runs) of function(*args), no allocation tracing."""
    best = float("inf")
    for _ in range(repeats):
        started = time.perf_counter()
        result = function(*args)
        best = min(best, time.perf_counter() - started)
    return result, best


def peak_mib(function, *args) -> float:
    """Peak MiB of allocations made during function(*args), in a separate traced run
    (tracing slows NumPy's allocations, so it never overlaps a timed run)."""
    tracemalloc.start()
    function(*args)
    peak = tracemalloc.get_traced_memory()[1] / 2**20
    tracemalloc.stop()
    return peak


def chunks(rows: pl.DataFrame) -> list[np.ndarray]:
    """Row indices in chunks of whole sequences of about CHUNK_ROWS rows."""
    ends = (
        rows.with_row_index()
        .group_by("sentence_id", maintain_order=True)
        .agg(pl.col("index").max())["index"]
        .to_numpy()
        + 1
    )
    bounds, start = [], 0
    for end in ends:
        if end - start >= CHUNK_ROWS:
            bounds.append(np.arange(start, end))
            start = end
    return [*bounds, np.arange(start, len(rows))] if start < len(rows) else bounds


def ours(hidden: HiddenStates) -> tuple[dict[tuple[int, int], float], float]:
    """PR by layer and offset, and the MiB the co-moments held."""
    statistics = EquilearningStatistics(
        ModelFacts.of(hidden.metadata), OFFSETS, ["model"], ["none"], 0
    )
    parts = chunks(hidden.rows)
    for layer in range(hidden.num_layers + 1):
        states = hidden.layer(layer)
        for part in parts:
            statistics.begin_rows(hidden.rows[part])
            statistics.observe(layer, torch.from_numpy(states[part]))
    moments = [*statistics.total.values(), *statistics.lacking.values()]
    held = sum(m.comoment.nbytes + m.mean.nbytes for m in moments) / 2**20
    table = statistics.table()
    return {(row["layer"], row["offset"]): row["pr"] for row in table.iter_rows(named=True)}, held


def features(hidden: HiddenStates, layer: int, norm: str = "model") -> np.ndarray:
    x = torch.from_numpy(hidden.layer(layer).astype(np.float64))
    if layer < hidden.num_layers:
        x = normalize(x, norm, hidden.metadata["norm_type"], hidden.metadata["norm_eps"])
    return x.numpy()


def targets(hidden: HiddenStates) -> tuple[np.ndarray, np.ndarray]:
    return target_matrix(hidden.rows, OFFSETS, ["none"], np.arange(1))


def baseline(hidden: HiddenStates) -> dict[tuple[int, int], float]:
    values, defined = targets(hidden)
    layers = [features(hidden, layer).astype(np.float32) for layer in range(hidden.num_layers + 1)]
    results = {}
    for layer, x in enumerate(layers):
        for index, offset in enumerate(OFFSETS):
            rows = defined[:, index]
            y = values[rows, index].astype(np.float32)
            fit = LinearRegression().fit(x[rows], y)
            results[(layer, offset)] = 1.0 - fit.score(x[rows], y)
    return results


def reference(hidden: HiddenStates, norm: str = "model") -> dict[tuple[int, int], float]:
    """PR by float64 lstsq on the centred rows, rcond = sqrt(cut-off), which drops the
    same directions as our eigenvalue cut-off (a standardised or LayerNorm-ed layer is
    exactly rank-deficient)."""
    values, defined = targets(hidden)
    results = {}
    for layer in range(hidden.num_layers + 1):
        x = features(hidden, layer, norm)
        for index, offset in enumerate(OFFSETS):
            rows = defined[:, index]
            design = x[rows] - x[rows].mean(axis=0)
            y = values[rows, index] - values[rows, index].mean()
            solution = np.linalg.lstsq(design, y, rcond=np.sqrt(DEFAULT_CUTOFF))[0]
            results[(layer, offset)] = ((y - design @ solution) ** 2).sum() / (y**2).sum()
    return results


def main() -> None:
    folder = Path(sys.argv[1] if len(sys.argv) > 1 else DEFAULT)
    if not folder.is_dir():
        sys.exit(
            f"no hidden states at {folder}: after `make run`, keep them with "
            f"`.venv/bin/snakemake --cores 2 {DEFAULT}` (or pass a folder)"
        )
    hidden = HiddenStates.open(folder)
    print(
        f"hidden states: {folder} ({len(hidden.rows)} rows, {hidden.num_layers + 1} layers, "
        f"hidden size {hidden.hidden_size}, {len(OFFSETS)} target offsets)"
    )
    (ours_pr, held_mb), ours_s = timed(ours, hidden)
    base_pr, base_s = timed(baseline, hidden)
    ours_mb, base_mb = peak_mib(ours, hidden) + held_mb, peak_mib(baseline, hidden)
    print(f"ours:      {ours_s:8.2f} s  peak {ours_mb:8.1f} MiB ({held_mb:.1f} of it co-moments)")
    print(f"baseline:  {base_s:8.2f} s  peak {base_mb:8.1f} MiB")
    exact = reference(hidden)
    ours_diff = max(abs(ours_pr[key] - exact[key]) for key in exact)
    base_diff = max(abs(base_pr[key] - exact[key]) for key in exact)
    print(f"largest |PR − lstsq float64|: ours {ours_diff:.3e}, baseline {base_diff:.3e}")
    print(
        f"speedup={base_s / ours_s:.2f} max_pr_diff={ours_diff:.3e} "
        f"peak_mb_ours={ours_mb:.1f} peak_mb_baseline={base_mb:.1f}"
    )


if __name__ == "__main__":
    main()
