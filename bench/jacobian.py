"""Benchmark: Jacobian rows of one block by batched VJPs (``vjp_chunk`` cotangents per
vmapped backward pass, layerlaws.coupling.jacobians) against a Python loop of single VJPs, and
randomised against full SVD of the resulting Jacobian.

On the default model (results/models/smollm2-135m, after `make run`), its middle block
and the paper's prompt: the d × d self-Jacobian of the last token, J = ∂f(X)_T / ∂x_T.
The loop builds the block's autograd graph once and pulls back one cotangent at a time
through it. Times are the best of three runs, but the loop's: one run (the whole bench
takes about 11 minutes on 2 cores). The SVDs keep
the top K = 50 singular values; the difference is the largest relative one.

Then the whole depth measurement (every block's last-token Jacobian: top-K factors, the
coupling matrix of every pair, m̃) at K = 10, matrix-free (``coupling.svd: matrix_free``,
layerlaws.coupling.operators) against the formed Jacobians with a full SVD: on the model
above (d = 576 for SmolLM2), both paths over every block, with the accuracy (largest
relative difference of the top-10 singular values, largest |Δm̃| over the L × L matrix);
and on a randomly initialised Qwen2 with Qwen2.5-1.5B's shapes (d = 1536, 28 blocks; its
products cost what the real model's do) on random token ids as many as the prompt's. There
both paths are timed on ``SAMPLED`` blocks and scaled to 28 (the matrix-free one with
the 28·K coupling columns every block needs), and m̃ is compared among those blocks.

Last, whole-sequence against token-local Jacobian products (``coupling.products``,
layerlaws.coupling.local), each line ``coupling_speedup=<whole-sequence seconds /
token-local seconds per prompt> T=<tokens> d=<width> product_vs_token_floor=<seconds per
token-local product / seconds per product of a batched VJP through the same block run on
the prompt's last token alone>``: on the model above and the paper's prompt, the whole
measurement of the prompt (``measure_prompt``, default settings) timed both ways; on the
d = 1536 Qwen2 with a 32-token prompt of random ids (``svd: auto`` takes the formed path
at K = 50), where the whole-sequence path would take half an hour, the real code path is
timed on samples and scaled by their counts: the last token's Jacobian of ``SAMPLED``
blocks (× 28), the token Jacobians of the middle block at output tokens T/4, T/2, 3T/4
(× T − 1: the self and fixed-input kinds) and at the last token (once: every input, the
fixed-output kind), each with its SVDs (the coupling matrices and metrics, a few percent
of either path, are left out). The floor's product is the depth Jacobian's of the middle
(sampled) block.

Usage: .venv/bin/python bench/jacobian.py [model folder] [vjp_chunk]
"""

from __future__ import annotations

import sys
import time

import torch
from transformers import Qwen2Config, Qwen2ForCausalLM

from layerlaws.coupling.costs import TOKEN_LOCAL, WHOLE_SEQUENCE
from layerlaws.coupling.jacobians import jacobian_rows, top_singular
from layerlaws.coupling.measurement import BlockJacobians, TokenCoupling, measure_prompt
from layerlaws.coupling.miscoupling import metric_matrices
from layerlaws.coupling.operators import (
    DenseJacobian,
    Linearisation,
    TokenJacobian,
    coupling_stack,
    randomized_factors,
)
from layerlaws.coupling.settings import CouplingSettings
from layerlaws.models.blocks import trace_blocks
from layerlaws.models.loading import load_model, load_tokenizer

PROMPT = "What is the capital of France? The capital is"
K = 50
DEPTH_K = 10
SAMPLED = 2
"""Blocks of the d = 1536 model both paths are timed on."""


def best_of(function, repeats: int = 3):
    """``function()``'s result and its best time of ``repeats`` runs, in seconds (the GPU
    synchronised before the clock stops)."""
    best, result = float("inf"), None
    for _ in range(repeats):
        started = time.perf_counter()
        result = function()
        if torch.cuda.is_available():
            torch.cuda.synchronize()
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
    single, loop_s = best_of(lambda: looped(branch, stream, last), repeats=1)
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
    depth_comparison(calls, streams[:-1], vjp_chunk, len(calls))
    qwen = Qwen2ForCausalLM(
        Qwen2Config(
            vocab_size=1000,
            hidden_size=1536,
            intermediate_size=8960,
            num_hidden_layers=28,
            num_attention_heads=12,
            num_key_value_heads=2,
            tie_word_embeddings=True,
            attn_implementation="eager",
        )
    ).eval()
    random_ids = torch.randint(0, 1000, ids.shape, generator=torch.Generator().manual_seed(0))
    calls, streams = trace_blocks(qwen, random_ids)
    sampled = [round(i * (len(calls) - 1) / (SAMPLED - 1)) for i in range(SAMPLED)]
    print(f"d = 1536: timing blocks {[b + 1 for b in sampled]} of {len(calls)}, scaled to all")
    depth_comparison(
        [calls[b] for b in sampled], [streams[b] for b in sampled], vjp_chunk, len(calls)
    )
    prompt_comparison(model, ids, vjp_chunk)
    long_ids = torch.randint(0, 1000, (1, 32), generator=torch.Generator().manual_seed(1))
    sampled_comparison(qwen, long_ids, vjp_chunk)


def floor_seconds(model, ids: torch.Tensor, block: int, vjp_chunk: int) -> float:
    """Seconds per product of d batched VJPs through block ``block`` run on the prompt's
    last token alone (a one-token sequence)."""
    calls, streams = trace_blocks(model, ids[:, -1:])
    width = streams.shape[2]
    _, seconds = best_of(
        lambda: jacobian_rows(calls[block].branch, streams[block], 0, [0], vjp_chunk * 32), 2
    )
    return seconds / width


def local_product_seconds(model, ids: torch.Tensor, block: int, vjp_chunk: int) -> float:
    """Seconds per token-local product: the last token's Jacobian of block ``block``
    formed by d VJPs, divided by d."""
    calls, streams = trace_blocks(model, ids)
    last, width = ids.shape[1] - 1, streams.shape[2]
    jacobians = BlockJacobians(calls[block], streams[block], "full", TOKEN_LOCAL, vjp_chunk)
    _, seconds = best_of(lambda: jacobians.between(last, [last])[0].matrix, 2)
    return seconds / width


def report(whole_s: float, local_s: float, model, ids: torch.Tensor, block: int, chunk: int):
    """The two lines of a comparison."""
    length, width = ids.shape[1], model.config.hidden_size
    floor = local_product_seconds(model, ids, block, chunk) / floor_seconds(
        model, ids, block, chunk
    )
    print(
        f"T = {length}, d = {width}: whole-sequence products {whole_s:8.1f} s per prompt   "
        f"token-local {local_s:8.1f} s"
    )
    print(
        f"coupling_speedup={whole_s / local_s:.2f} T={length} d={width} "
        f"product_vs_token_floor={floor:.2f}"
    )


def prompt_comparison(model, ids: torch.Tensor, vjp_chunk: int) -> None:
    """The whole measurement of the prompt ``ids``, both ways."""
    seconds = {}
    for products in (WHOLE_SEQUENCE, TOKEN_LOCAL):
        settings = CouplingSettings(products=products)
        coupling = TokenCoupling.of(settings, model.config.num_hidden_layers)
        _, seconds[products] = best_of(
            lambda s=settings, c=coupling: measure_prompt(
                model, ids, token_coupling=c, settings=s, vjp_chunk=vjp_chunk
            ),
            1,
        )
    middle = model.config.num_hidden_layers // 2
    report(seconds[WHOLE_SEQUENCE], seconds[TOKEN_LOCAL], model, ids, middle, vjp_chunk)


def sampled_comparison(model, ids: torch.Tensor, vjp_chunk: int) -> None:
    """Both ways on samples of the measurement of ``ids``, scaled (module docstring)."""
    calls, streams = trace_blocks(model, ids)
    length, layers = ids.shape[1], len(calls)
    last, middle = length - 1, layers // 2
    blocks = [round(i * (layers - 1) / (SAMPLED - 1)) for i in range(SAMPLED)]
    outputs = [length // 4, length // 2, 3 * length // 4]
    seconds = {}
    for products in (WHOLE_SEQUENCE, TOKEN_LOCAL):

        def factored(block: int, output: int, inputs: list[int], p: str = products) -> float:
            started = time.perf_counter()
            jacobians = BlockJacobians(calls[block], streams[block], "full", p, vjp_chunk)
            for jacobian in jacobians.between(output, inputs):
                top_singular(jacobian.matrix, K)
            return time.perf_counter() - started

        depth = sum(factored(block, last, [last]) for block in blocks) * layers / len(blocks)
        tokens = sum(factored(middle, t, [0, t]) for t in outputs) * (length - 1) / len(outputs)
        seconds[products] = depth + tokens + factored(middle, last, list(range(length)))
        print(f"{products}: {seconds[products]:.1f} s per prompt (scaled)", flush=True)
    report(seconds[WHOLE_SEQUENCE], seconds[TOKEN_LOCAL], model, ids, middle, vjp_chunk)


def depth_comparison(calls, streams, vjp_chunk: int, num_layers: int) -> None:
    """Both paths of the depth measurement at K = ``DEPTH_K`` on the given blocks (each
    block's input stream (T, d) in ``streams``, one per call), timed
    and scaled to ``num_layers`` blocks (the matrix-free coupling step with the
    ``num_layers``·K columns each block needs: the given blocks' factors repeated)."""
    last, width, scale = streams[0].shape[0] - 1, streams[0].shape[1], num_layers / len(calls)
    started = time.perf_counter()
    formed = [
        DenseJacobian(jacobian_rows(c.branch, x, last, [last], vjp_chunk)[0])
        for c, x in zip(calls, streams, strict=True)
    ]
    full_factors = [top_singular(j.matrix, DEPTH_K) for j in formed]
    full_m = miscoupling(formed, full_factors, full_factors * round(scale))
    full_s = (time.perf_counter() - started) * scale
    started = time.perf_counter()
    operators = [
        TokenJacobian(Linearisation(c.branch, x, vjp_chunk).at(last), last)
        for c, x in zip(calls, streams, strict=True)
    ]
    free_factors = [randomized_factors(j, DEPTH_K) for j in operators]
    free_m = miscoupling(operators, free_factors, free_factors * round(scale))
    free_s = (time.perf_counter() - started) * scale
    values = max(
        ((f[1] - m[1]).abs() / m[1]).max().item()
        for f, m in zip(free_factors, full_factors, strict=True)
    )
    difference = (free_m - full_m).abs().max().item()
    print(
        f"depth at K = {DEPTH_K}, {num_layers} blocks: whole Jacobians + full SVD {full_s:8.1f} s"
        f"{' (scaled)' if scale != 1 else ''}   matrix-free {free_s:8.1f} s   top-{DEPTH_K} "
        f"singular values, largest relative difference {values:.2e}"
    )
    print(
        f"matrix_free_vs_full={full_s / free_s:.2f} d={width} max_miscoupling_diff={difference:.3e}"
    )


def miscoupling(operators, factors, timed) -> torch.Tensor:
    """m̃ of every pair of the given blocks; the coupling products are made with all of
    ``timed`` (one factor per block of the whole model) and cut to the given blocks."""
    couplings = torch.stack(
        [coupling_stack(op, timed, DEPTH_K)[: len(factors)] for op in operators]
    )
    return metric_matrices(couplings, None, None, [DEPTH_K])["paper", DEPTH_K]


if __name__ == "__main__":
    main()
