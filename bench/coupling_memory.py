"""Benchmark: the peak host memory of a coupling job against its number of prompts.

The same ``measure_coupling`` job (Snakemake runs the workflow's own rule and script,
which end their log with the job's peak resident memory, the kernel's ``VmHWM``) over 10
and over 100 prompts of 64 tokens, each run in a fresh workflow folder, on a small random
Llama deep enough for its residual streams to weigh (d = 256, L = 48: 3.2 MB of float32
streams per prompt and weights) with its random twin, on the CPU. A job that keeps every
prompt's measurement until its end grows with the prompts; one that writes each as it is
measured does not. Each count runs three times and the ratio compares the lowest peaks:
the same job's peak varies from run to run by up to 400 MB above its lowest, in the
transient memory of its Jacobian products, for 10 prompts as for 100 (8 products at a
time here, ``execution.vjp_chunk``, which keeps that transient small).

The workflow, scripts and library are those of the ``layerlaws`` Python imports: run it
with ``PYTHONPATH=<another checkout>`` to measure that checkout (e.g. one made by
``git worktree add /tmp/old HEAD``).

Usage: .venv/bin/python bench/coupling_memory.py [jacobian_prompts]   (default 1)
The Jacobians' coupling is measured on the first ``jacobian_prompts`` prompts, the
trajectories on every one (as the paper config's wikitext2 prompts: 1 of 100; its
leaderboard prompts: 100 of 1,201). The last line:
``coupling_peak_rss_100_vs_10_prompts=<peak over 100 prompts / peak over 10>``.
"""

from __future__ import annotations

import random
import subprocess
import sys
import tempfile
from pathlib import Path

import yaml

import layerlaws
from layerlaws.core.logs import USE_LINE
from layerlaws.rehearsal.standins import tokenizer_of
from layerlaws.rehearsal.tiny_models import save_tiny_model

REPO = Path(layerlaws.__file__).resolve().parent.parent
SIZES = {"hidden_size": 256, "num_hidden_layers": 48, "intermediate_size": 512}
LENGTH = 64
"""Tokens per prompt, BOS included."""
COUNTS = (10, 100)
REPEATS = 3
WORDS = 500


def prompt_texts(count: int, length: int = LENGTH) -> list[str]:
    """``count`` texts of ``length`` − 1 words of a WORDS-word vocabulary, seeded."""
    generator = random.Random(0)
    return [
        " ".join(f"w{generator.randrange(WORDS)}" for _ in range(length - 1)) for _ in range(count)
    ]


def tiny_llama(folder: Path, sizes: dict[str, int] = SIZES) -> Path:
    """A random Llama of ``sizes`` (the benchmark's by default) and its word-level
    tokenizer (every word known), saved."""
    vocabulary = " ".join(f"w{word}" for word in range(WORDS))
    return save_tiny_model(folder, "llama", tokenizer_of("llama", [vocabulary]), **sizes)


def run_coupling(workdir: Path, config: dict) -> Path:
    """The workflow's coupling job of the model ``bench`` on the prompts ``bench`` of
    ``config``, run by Snakemake in the new folder ``workdir``; its results folder."""
    workdir.mkdir(parents=True)
    (workdir / "config.yaml").write_text(yaml.safe_dump(config))
    command = [
        sys.executable,
        "-m",
        "snakemake",
        "--snakefile",
        str(REPO / "Snakefile"),
        "--directory",
        str(workdir),
        "--configfile",
        str(workdir / "config.yaml"),
        "--cores",
        "2",
        "results/coupling/bench/bench/depth.csv",
    ]
    result = subprocess.run(command, capture_output=True, text=True)
    if result.returncode != 0:
        sys.exit(f"the coupling job failed:\n{result.stderr[-4000:]}")
    return workdir / "results"


def job_peak(model: Path, count: int, jacobian_prompts: int, workdir: Path) -> tuple[float, float]:
    """(peak MB, seconds) of the coupling job over ``count`` prompts, from its log."""
    config = {
        "models": {"bench": {"source": {"kind": "local", "path": str(model)}}},
        "coupling": {
            "prompts": {
                "bench": {
                    "texts": prompt_texts(count),
                    "max_tokens": LENGTH,
                    "jacobian_prompts": jacobian_prompts,
                }
            },
            "runs": [{"model": "bench", "prompts": "bench"}],
            "ks": [4],
            "metrics": ["paper"],
        },
        "execution": {"device": "cpu", "vjp_chunk": 8, "lock_dir": str(workdir / "locks")},
    }
    log = run_coupling(workdir, config) / "logs/measure_coupling/bench/bench.log"
    found = USE_LINE.search(log.read_text().splitlines()[-1])
    return float(found["peak_mb"].replace(",", "")), float(found["seconds"])


def main() -> None:
    jacobian_prompts = int(sys.argv[1]) if len(sys.argv) > 1 else 1
    print(f"layerlaws from {REPO}; Jacobians on the first {jacobian_prompts} prompts")
    with tempfile.TemporaryDirectory() as scratch:
        model = tiny_llama(Path(scratch) / "model")
        peaks = {}
        for count in COUNTS:
            runs = []
            for repeat in range(REPEATS):
                workdir = Path(scratch) / f"{count}-{repeat}"
                runs.append(job_peak(model, count, jacobian_prompts, workdir))
            peaks[count] = min(peak for peak, _ in runs)
            print(
                f"{count:4d} prompts of {LENGTH} tokens: the job's peak "
                + ", ".join(f"{peak:.0f} MB ({seconds:.0f} s)" for peak, seconds in runs)
                + f"; lowest {peaks[count]:.0f} MB"
            )
    print(f"coupling_peak_rss_100_vs_10_prompts={peaks[100] / peaks[10]:.3f}")


if __name__ == "__main__":
    main()
