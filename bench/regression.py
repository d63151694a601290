"""Benchmark: our streaming PR against the reference code's method, on cached hidden states.

Ours: ``prediction_residual_table`` (float64 moments streamed from the memory-mapped cache,
one shared co-moment per layer for all targets). Baseline (the paper's code): one
scikit-learn ``LinearRegression`` per layer and target on float32 arrays held in memory,
PR = 1 − R². Both use the ``model`` normalisation and the same rows. Reference: float64
``numpy.linalg.lstsq`` with an intercept on the same rows.

Times are the best of two runs, without allocation tracing; peak memory is the peak of
Python-visible allocations (tracemalloc; NumPy and SciPy report theirs) in a separate,
traced run of each.

Usage (after `make run`, which caches the default model's hidden states):
    .venv/bin/python bench/regression.py [results/hidden/smollm2-135m/wiki-science]
"""

from __future__ import annotations

import sys
import time
import tracemalloc
from pathlib import Path

import numpy as np
from sklearn.linear_model import LinearRegression

from layerlaws.equilearning import prediction_residual_table, target_matrix
from layerlaws.hidden import HiddenStates
from layerlaws.norms import normalize

OFFSETS = [-1, 0, 1, 2]
DEFAULT = "results/hidden/smollm2-135m/wiki-science"


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


def features(hidden: HiddenStates, layer: int) -> np.ndarray:
    x = np.asarray(hidden.layer(layer), dtype=np.float64)
    if layer < hidden.num_layers:
        x = normalize(x, "model", hidden.metadata["norm_type"], hidden.metadata["norm_eps"])
    return x


def ours(hidden: HiddenStates) -> dict[tuple[int, int], float]:
    table = prediction_residual_table(hidden, OFFSETS, ["model"], ["none"])
    return {(row["layer"], row["offset"]): row["pr"] for row in table.iter_rows(named=True)}


def baseline(hidden: HiddenStates) -> dict[tuple[int, int], float]:
    targets, defined = target_matrix(hidden.rows, OFFSETS, ["none"], 1, 0)
    layers = [features(hidden, layer).astype(np.float32) for layer in range(hidden.num_layers + 1)]
    results = {}
    for layer, x in enumerate(layers):
        for index, offset in enumerate(OFFSETS):
            rows = defined[:, index]
            y = targets[rows, index].astype(np.float32)
            fit = LinearRegression().fit(x[rows], y)
            results[(layer, offset)] = 1.0 - fit.score(x[rows], y)
    return results


def reference(hidden: HiddenStates) -> dict[tuple[int, int], float]:
    targets, defined = target_matrix(hidden.rows, OFFSETS, ["none"], 1, 0)
    results = {}
    for layer in range(hidden.num_layers + 1):
        x = features(hidden, layer)
        for index, offset in enumerate(OFFSETS):
            rows = defined[:, index]
            design = np.hstack([x[rows], np.ones((rows.sum(), 1))])
            y = targets[rows, index]
            residual = y - design @ np.linalg.lstsq(design, y, rcond=None)[0]
            results[(layer, offset)] = (residual**2).sum() / ((y - y.mean()) ** 2).sum()
    return results


def main() -> None:
    folder = Path(sys.argv[1] if len(sys.argv) > 1 else DEFAULT)
    if not folder.is_dir():
        sys.exit(f"no hidden states at {folder}: run `make run` first (or pass a folder)")
    hidden = HiddenStates.open(folder)
    print(
        f"hidden states: {folder} ({len(hidden.rows)} rows, {hidden.num_layers + 1} layers, "
        f"hidden size {hidden.hidden_size}, {len(OFFSETS)} target offsets)"
    )
    ours_pr, ours_s = timed(ours, hidden)
    base_pr, base_s = timed(baseline, hidden)
    ours_mb, base_mb = peak_mib(ours, hidden), peak_mib(baseline, hidden)
    print(f"ours:      {ours_s:8.2f} s  peak {ours_mb:8.1f} MiB")
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
