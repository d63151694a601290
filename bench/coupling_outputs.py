"""Benchmark: the bytes a coupling job writes per prompt, with ``coupling.keep_arrays`` at
its default (the figures' prompt) and at ``all``, against the planner's figure.

The workflow's ``measure_coupling`` job (Snakemake runs its rule and script) of a small
random Llama (d = 128, L = 12: 213 kB of float32 streams per prompt and weights) and its
random twin, on the CPU, over 8 prompts of 32 tokens, the Jacobians on the first 2; each
run in a fresh workflow folder (``bench/coupling_memory.py``'s). The bytes are
those of the job's outputs (its tables and arrays, ``layerlaws.coupling.prompt_set``);
the planner's are ``layerlaws.coupling.costs.coupling_output_bytes`` for the same model
size, prompts and settings (the tables' rows at ``ROW_DISK_BYTES`` each).

The workflow, scripts and library are those of the ``layerlaws`` Python imports
(``PYTHONPATH=<checkout>`` measures another one).

Usage: .venv/bin/python bench/coupling_outputs.py
The last line: ``coupling_outputs_bytes_per_prompt=<measured, default> planned=<planner,
default> all=<measured, all> planned_all=<planner, all>``.
"""

from __future__ import annotations

import tempfile
from pathlib import Path

from coupling_memory import prompt_texts, run_coupling, tiny_llama

from layerlaws.core.settings import with_defaults
from layerlaws.coupling.costs import OutputPrompts, coupling_output_bytes
from layerlaws.coupling.workflow import MEASURED
from layerlaws.forward.costs import ModelSize

SIZES = {"hidden_size": 128, "num_hidden_layers": 12, "intermediate_size": 256}
LENGTH = 32
"""Tokens per prompt, BOS included."""
PROMPTS = 8
JACOBIAN_PROMPTS = 2


def bench_config(model: Path, workdir: Path, keep: str) -> dict:
    """The benchmark's config: the model ``bench`` on the prompts ``bench``, keeping the
    arrays ``keep`` says."""
    return {
        "models": {"bench": {"source": {"kind": "local", "path": str(model)}}},
        "coupling": {
            "prompts": {
                "bench": {
                    "texts": prompt_texts(PROMPTS, LENGTH),
                    "max_tokens": LENGTH,
                    "jacobian_prompts": JACOBIAN_PROMPTS,
                    "jacobian_draw": "first",
                }
            },
            "runs": [{"model": "bench", "prompts": "bench"}],
            "ks": [4],
            "metrics": ["paper"],
            "keep_arrays": keep,
        },
        "execution": {"device": "cpu", "vjp_chunk": 8, "lock_dir": str(workdir / "locks")},
    }


def measured_bytes(model: Path, workdir: Path, keep: str) -> tuple[int, int]:
    """(bytes the job wrote per prompt, the planner's per prompt) under ``keep``."""
    config = bench_config(model, workdir, keep)
    folder = run_coupling(workdir, config) / "coupling/bench/bench"
    written = sum((folder / name).stat().st_size for name in MEASURED.values())
    settings = with_defaults(config)["coupling"]
    prompt_set = settings["prompts"]["bench"]
    size = ModelSize(0, SIZES["num_hidden_layers"], SIZES["hidden_size"], 0, "llama")
    planned = coupling_output_bytes(size, OutputPrompts.of(prompt_set, keep), LENGTH, settings)
    for name in MEASURED.values():
        print(f"  {keep:8s} {name:26s} {(folder / name).stat().st_size:>12,d} bytes")
    return written // PROMPTS, planned // PROMPTS


def main() -> None:
    print(
        f"{PROMPTS} prompts of {LENGTH} tokens, Jacobians on {JACOBIAN_PROMPTS}; a random "
        f"Llama of d = {SIZES['hidden_size']}, L = {SIZES['num_hidden_layers']}, on the CPU"
    )
    with tempfile.TemporaryDirectory() as scratch:
        model = tiny_llama(Path(scratch) / "model", SIZES)
        kept, planned = measured_bytes(model, Path(scratch) / "figures", "figures")
        every, planned_every = measured_bytes(model, Path(scratch) / "all", "all")
    print(f"figures: {kept:,d} bytes per prompt, {kept / planned:.3f} of the plan's {planned:,d}")
    print(
        f"all:     {every:,d} bytes per prompt, {every / planned_every:.3f} of the plan's "
        f"{planned_every:,d}; the default writes {kept / every:.3f} of it"
    )
    print(
        f"coupling_outputs_bytes_per_prompt={kept} planned={planned} all={every} "
        f"planned_all={planned_every}"
    )


if __name__ == "__main__":
    main()
