"""The coupling's cost model (``layerlaws.coupling.costs``): what ``svd: auto`` chooses and
what token-local products save, against counts made here by hand; and the estimate's
GPU-hours line (``layerlaws.pipeline.planning.gpu_hours_line``)."""

from __future__ import annotations

import pytest

from layerlaws.coupling.costs import (
    FORMED,
    KEY_VALUE_SHARE,
    MATRIX_FREE,
    PromptShape,
    sketch_products,
)
from layerlaws.pipeline.planning import gpu_hours_line

PAPER = ("paper", "unnormalised")


def test_a_formed_prompt_costs_d_products_per_jacobian_graph():
    """L = 2, d = 8, T = 3, one token layer: 2 depth Jacobians and, per output token, d
    VJPs to itself and (after the first) d to the earlier tokens: whole-sequence each
    costs T block-tokens, token-local 1, plus KEY_VALUE_SHARE per earlier token."""
    shape = PromptShape(2, 8, 3, 4, PAPER, [(1, 1)])
    whole = 2 * 8 * 3 + (8 * 3 + 0) + (8 * 3 + 8 * 3) + (8 * 3 + 8 * 3)
    assert shape.cost(FORMED, token_local=False) == whole
    local = 2 * 8 + 8 + (8 + 8 * (1 + KEY_VALUE_SHARE)) + (8 + 8 * (1 + 2 * KEY_VALUE_SHARE))
    assert shape.cost(FORMED, token_local=True) == pytest.approx(local)


def test_a_one_token_prompt_costs_the_same_either_way():
    shape = PromptShape(4, 64, 1, 10, PAPER, [(2, 2)])
    for svd in (FORMED, MATRIX_FREE):
        assert shape.cost(svd, token_local=True) == shape.cost(svd, token_local=False) > 0


@pytest.mark.parametrize(
    ("layers", "width", "k", "chosen"),
    [
        (30, 576, 50, FORMED),  # SmolLM2 at the default K: 1,200 + 1,500 > 576 a block
        (28, 1536, 10, MATRIX_FREE),  # Qwen2.5-1.5B at K = 10: 200 + 280 < 1,536
        (28, 1536, 50, FORMED),
    ],
)
def test_auto_takes_the_path_with_fewer_products(layers, width, k, chosen):
    shape = PromptShape(layers, width, 10, k, PAPER, [(layers // 2, layers // 2)])
    assert shape.cheaper_svd(token_local=True) == chosen
    depth_free = sketch_products(k) + layers * k
    assert (depth_free < width) == (chosen == MATRIX_FREE)


def test_the_gpu_hours_line_schedules_the_longest_jobs_first():
    rows = [
        {"job": "measure_coupling", "gpu": 2, "runtime": 120},
        {"job": "equilearning_pass", "gpu": 1, "runtime": 60},
        {"job": "tokenize", "gpu": 0, "runtime": 30},
    ]
    # 2 GPUs × 2 h + 1 h + 0.5 h (a CPU job counts as one device); on 2 GPUs: the coupling
    # job on both for 2 h, then the pass for 1 h and the CPU job for 0.5 h beside it.
    assert gpu_hours_line(rows, 2) == ("gpu_hours=5.5 coupling_gpu_hours=4.0 wall_hours_on=2:3.0")
    # On 1 GPU, one after the other (the 2-GPU job on the one there is).
    assert gpu_hours_line(rows, 1) == "gpu_hours=5.5 coupling_gpu_hours=4.0 wall_hours_on=1:3.5"
