"""Benchmark: the coupling stage's block Jacobians against the model's own steps, per
family.

For a tiny random model (seed 0, three blocks) of every family of the architecture table
and a five-token prompt, the stage's Jacobian of the first, middle and last block
(``trace_blocks`` + ``jacobian_rows``, plus the identity) against torch.autograd's
Jacobian of the whole model's forward pass with the stream substituted at that block
(tests/whole_model_jacobians.py), over every (output, input) token pair. Prints the largest
relative difference ‖J_pipeline − J_reference‖_max / ‖J_reference‖_max per block and
family, in float64 where the family runs in it (float32 otherwise, see
tests/models/test_block_jacobians.py), then ``families=<n> max_rel_diff=<x>``.

Usage: .venv/bin/python bench/block_jacobians.py [family ...]
"""

from __future__ import annotations

import shutil
import sys
import tempfile
import time
from pathlib import Path

import torch

TESTS = Path(__file__).resolve().parent.parent / "tests"
sys.path[:0] = [str(TESTS), str(TESTS / "models")]

import conftest  # noqa: E402  (sets the offline, temporary caches the tiny models use)
from test_block_jacobians import BLOCKS, PROMPT  # noqa: E402
from tiny_models import ALL_FAMILIES, tiny_family_model  # noqa: E402
from whole_model_jacobians import (  # noqa: E402
    pipeline_step_jacobian,
    reference_step_jacobian,
    relative_difference,
)


def family_differences(family: str, tokenizer, folder: Path) -> tuple[str, list[float]]:
    """The model's dtype and the relative difference of each block in ``BLOCKS``."""
    model = tiny_family_model(family, tokenizer, folder)
    ids = torch.tensor([PROMPT])
    differences = []
    for block in BLOCKS.values():
        jacobian, streams = pipeline_step_jacobian(model, ids, block)
        reference = reference_step_jacobian(model, ids, block, streams[block])
        differences.append(relative_difference(jacobian, reference))
    return str(next(model.parameters()).dtype).removeprefix("torch."), differences


def main() -> None:
    families = sys.argv[1:] or list(ALL_FAMILIES)
    tokenizer = conftest.llama_tokenizer(conftest.corpus_texts())
    print(f"| family | dtype | {' | '.join(BLOCKS)} | seconds |")
    print("|---|---|" + "---|" * len(BLOCKS) + "---|")
    largest = 0.0
    try:
        for family in families:
            started = time.perf_counter()
            with tempfile.TemporaryDirectory() as folder:
                dtype, differences = family_differences(family, tokenizer, Path(folder))
            largest = max(largest, *differences)
            cells = " | ".join(f"{difference:.1e}" for difference in differences)
            print(f"| {family} | {dtype} | {cells} | {time.perf_counter() - started:.1f} |")
    finally:
        shutil.rmtree(conftest.CACHE, ignore_errors=True)
    print(f"families={len(families)} max_rel_diff={largest:.3e}")


if __name__ == "__main__":
    main()
