"""The numerical tests (marker ``numerics``: those comparing the code's numbers with an
independent reference) under each kernel set PyTorch offers on this CPU and with 1 and 2
threads, so that a tolerance that holds on one CPU's kernels only fails here too.

A kernel set is ATen's (``ATEN_CPU_CAPABILITY``: ``default``, ``avx2``, ``avx512`` up to
what the CPU has) with MKL's matching instructions (``MKL_ENABLE_INSTRUCTIONS``); torch's
threads are set through ``LAYERLAWS_TEST_THREADS`` (tests/conftest.py). Each combination
runs in its own pytest process (the capability is read when torch is imported), as many side
by side as their threads fit in the cores; the one the main run of ``make test`` already
covered (the CPU's own set at N threads per worker) is left out with
``--skip-native-threads N``.

Usage: python tests/kernel_sets.py [--skip-native-threads N] [pytest arguments...]
Prints each run's output as it ends, then one line per combination, and exits non-zero if
any failed.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import torch

KERNEL_SETS = {"default": "SSE4_2", "avx2": "AVX2", "avx512": "AVX512"}
"""ATen's CPU capability → MKL's instructions of the same width, narrowest first."""
THREADS = (1, 2)


def offered() -> list[str]:
    """The kernel sets this CPU runs: ``default`` up to torch's own choice for it."""
    native = torch.backends.cpu.get_cpu_capability().lower()
    names = list(KERNEL_SETS)
    return names[: names.index(native) + 1] if native in names else ["default"]


def started(kernel_set: str, threads: int, arguments: list[str]) -> subprocess.Popen:
    """pytest on the numerical tests under ``kernel_set`` with ``threads``, started (its
    output kept, to be printed whole when it ends)."""
    env = os.environ | {
        "ATEN_CPU_CAPABILITY": kernel_set,
        "MKL_ENABLE_INSTRUCTIONS": KERNEL_SETS[kernel_set],
        "LAYERLAWS_TEST_THREADS": str(threads),
    }
    command = [sys.executable, "-m", "pytest", "-q", "-m", "numerics and not slow", *arguments]
    return subprocess.Popen(
        command,
        env=env,
        cwd=Path(__file__).parents[1],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )


def main(argv: list[str]) -> int:
    """Run every combination but the skipped one, as many side by side as their threads fit
    in the cores; print each one's output as it ends, then one line per combination."""
    skipped = None
    if argv[:1] == ["--skip-native-threads"]:
        skipped, argv = (offered()[-1], int(argv[1])), argv[2:]
    waiting = [(k, t) for t in THREADS for k in offered() if (k, t) != skipped]
    cores, running, lines, failed = os.cpu_count() or 1, {}, [], False
    if skipped:
        lines.append(f"kernel set {skipped[0]}, {skipped[1]} thread(s): run by the main run")
    while waiting or running:
        while waiting and sum(t for _, t in running) + waiting[0][1] <= max(cores, waiting[0][1]):
            combination = waiting.pop(0)
            running[combination] = (started(*combination, argv), time.perf_counter())
        combination = _first_ended(running)
        process, began = running.pop(combination)
        output = process.stdout.read()
        status = process.wait()
        failed |= status != 0
        label = f"kernel set {combination[0]}, {combination[1]} thread(s):"
        verdict = "passed" if status == 0 else f"FAILED (pytest exit {status})"
        print(f"--- {label}\n{output}", flush=True)
        lines.append(f"{label} {verdict} in {time.perf_counter() - began:.0f} s")
    print("\n".join(lines))
    return int(failed)


def _first_ended(running: dict) -> tuple[str, int]:
    """The running combination that ends first (polled every second)."""
    while True:
        for combination, (process, _) in running.items():
            if process.poll() is not None:
                return combination
        time.sleep(1)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
