"""Benchmark: Jacobian rows of one block by batched VJPs (``vjp_chunk`` cotangents per
vmapped backward pass, layerlaws.coupling.jacobians) against a Python loop of single VJPs, and
randomised against full SVD of the resulting Jacobian.

On the default model (results/models/smollm2-135m, after `make run`), its middle block
and the paper's prompt: the d × d self-Jacobian of the last token, J = ∂f(X)_T / ∂x_T.
The loop builds the block's autograd graph once and pulls back one cotangent at a time
through it. Times are the best of three runs. The SVDs keep the top K = 50 singular
values; the difference is the largest relative one.

Usage: .venv/bin/python bench/jacobian.py [model folder] [vjp_chunk]
"""

from __future__ import annotations

import sys
import time

import torch

from layerlaws.coupling.jacobians import jacobian_rows, top_singular
from layerlaws.models.blocks import trace_blocks
from layerlaws.models.loading import load_model, load_tokenizer

PROMPT = "What is the capital of France? The capital is"
K = 50


def best_of(function, repeats: int = 3):
    best, result = float("inf"), None
    for _ in range(repeats):
        started = time.perf_counter()
        result = function()
        best = min(best, time.perf_counter() - started)
    return result, best


def looped(branch, stream: torch.Tensor, output: int) -> torch.Tensor:
    """The baseline: one backward pass per row of J."""
    inputs = stream[None].clone().requires_grad_(True)
    rows = []
    with torch.enable_grad():
        outputs = branch(inputs)
        for i in range(stream.shape[1]):
            cotangent = torch.zeros_like(outputs)
            cotangent[0, output, i] = 1
            (gradient,) = torch.autograd.grad(outputs, inputs, cotangent, retain_graph=True)
            rows.append(gradient[0, output])
    return torch.stack(rows)


def main() -> None:
    folder = sys.argv[1] if len(sys.argv) > 1 else "results/models/smollm2-135m"
    vjp_chunk = int(sys.argv[2]) if len(sys.argv) > 2 else 64
    torch.manual_seed(0)
    model = load_model(folder, "float32", "cpu", attention="eager")
    ids = torch.tensor([load_tokenizer(folder)(PROMPT)["input_ids"]])
    calls, streams = trace_blocks(model, ids)
    middle = len(calls) // 2
    branch, stream, last = calls[middle].branch, streams[middle], ids.shape[1] - 1
    print(
        f"model {folder}, block {middle + 1} of {len(calls)}, {ids.shape[1]} tokens, "
        f"hidden size {stream.shape[1]}, vjp_chunk {vjp_chunk}"
    )
    batched, vmap_s = best_of(lambda: jacobian_rows(branch, stream, last, [last], vjp_chunk)[0])
    single, loop_s = best_of(lambda: looped(branch, stream, last))
    difference = (batched - single).abs().max().item()
    print(f"batched: {vmap_s:7.3f} s   loop: {loop_s:7.3f} s   max |difference| {difference:.2e}")
    (_, full, _), full_s = best_of(lambda: top_singular(batched, K, "full"))
    (_, fast, _), fast_s = best_of(lambda: top_singular(batched, K, "randomized"))
    relative = ((fast - full).abs() / full).max().item()
    print(
        f"full SVD: {full_s:7.3f} s   randomised: {fast_s:7.3f} s   "
        f"top-{K} singular values, largest relative difference {relative:.2e}"
    )
    print(
        f"vmap_vs_loop={loop_s / vmap_s:.2f} randomized_vs_full={full_s / fast_s:.2f} "
        f"max_sv_rel_diff={relative:.3e}"
    )


if __name__ == "__main__":
    main()
