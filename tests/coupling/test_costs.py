"""The coupling's cost model (``layerlaws.coupling.costs``): what ``svd: auto`` chooses and
what token-local products save, against counts made here by hand; the host memory planned
for a coupling job (its random twin, one prompt's measurement, the prompts' tokens); and
the estimate's GPU-hours line (``layerlaws.pipeline.planning.gpu_hours_line``)."""

from __future__ import annotations

import pytest

from layerlaws.coupling.costs import (
    FORMED,
    KEY_VALUE_SHARE,
    MATRIX_FREE,
    TOKEN_BYTES,
    PromptShape,
    coupling_merge_needs,
    coupling_needs,
    prompt_host_bytes,
    sketch_products,
    twin_host_bytes,
)
from layerlaws.forward.costs import HOST_BASE_MB, ModelSize
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


LLAMA_70B = ModelSize(70_553_706_496, 80, 8192, 128_256, "llama")
GIB = 2**30
PAPER_SETTINGS = {
    "ks": [10, 30, 50],
    "metrics": ["paper", "unnormalised", "released_trace", "released_norm"],
    "token_layers": [],
    "products": "token_local",
    "svd": "auto",
}


def prompt_set(prompts: int) -> dict:
    return {
        "texts": ["a"] * prompts,
        "n_from_dataset": 0,
        "max_tokens": 128,
        "jacobian_prompts": 100,
    }


def planned(prompts: int, **options):
    """The needs of the paper's coupling of a 70B Llama (nf4, on GPUs) on ``prompts``."""
    return coupling_needs(
        size=LLAMA_70B,
        settings=PAPER_SETTINGS,
        prompt_set=prompt_set(prompts),
        shards=1,
        dtype="bfloat16",
        quantization="nf4",
        on_gpu=True,
        gpus="auto",
        gpu_memory_gb=80,
        **options,
    )


def test_a_coupling_jobs_host_memory_grows_with_its_prompts_by_their_tokens_alone():
    """Each prompt's streams (L + 1, T, d) float32, 340 MB here under each weights, are
    written as they are measured: ten times the prompts add their tokens only."""
    few, many = planned(120), planned(1201)
    tokens_mb = (1201 - 120) * 128 * TOKEN_BYTES / 2**20
    assert many.mem_mb - few.mem_mb == pytest.approx(tokens_mb, abs=1)
    streams_mb = (1201 - 120) * 2 * 81 * 128 * 8192 * 4 / 2**20
    assert many.disk_mb - few.disk_mb > 2 * streams_mb  # its files, then its outputs


def test_a_coupling_job_plans_its_random_twin_drawn_one_block_at_a_time():
    """A drawn twin of a 70B Llama holds one unit at a time on the host, in float32: twice
    (``TWIN_COPIES``) twice the mean block (``BLOCK_SPREAD``), 4 × 2 × 2 ×
    (70,553,706,496 − 128,256 × 8,192) / 80 bytes, not the 282 GB of the whole twin; a
    training's step-0 checkpoint is loaded as the trained weights are, a shard at a time
    (counted with them), and one prompt's measurement is the larger. Beside it, the job's
    base, one shard of weights and the prompts' tokens."""
    drawn, read = planned(1201), planned(1201, step_zero=True)
    block = (70_553_706_496 - 128_256 * 8192) / 80
    assert twin_host_bytes(LLAMA_70B) == pytest.approx(4 * 2 * 2 * block, abs=1)
    prompt = prompt_host_bytes(LLAMA_70B, 128, PAPER_SETTINGS)
    assert prompt < twin_host_bytes(LLAMA_70B)
    assert (drawn.mem_mb - read.mem_mb) * 2**20 == pytest.approx(4 * 4 * block - prompt, abs=2**20)
    held = HOST_BASE_MB * 2**20 + 5 * GIB + prompt + 1201 * 128 * TOKEN_BYTES
    assert held < read.mem_mb * 2**20 < held + GIB
    assert drawn.mem_mb / 1024 < 64


def test_a_twin_whose_embeddings_outweigh_its_blocks_plans_its_embeddings():
    """GPT-2 (124M): its 50,257 × 768 token embeddings are larger than twice its mean
    block, so they are the unit the host holds."""
    gpt2 = ModelSize(124_439_808, 12, 768, 50_257, "gpt2")
    assert twin_host_bytes(gpt2) == 4 * 2 * 50_257 * 768


def test_the_merge_of_coupling_shards_holds_one_prompt():
    """The merge reads the shards a prompt at a time: its host memory is far below the
    outputs it writes, and grows with the prompts by their tokens alone."""
    few, many = (
        coupling_merge_needs(size=LLAMA_70B, settings=PAPER_SETTINGS, prompt_set=prompt_set(n))
        for n in (120, 1201)
    )
    assert many.gpu == 0 and many.mem_mb < 5 * 1024 < many.disk_mb / 100
    tokens_mb = (1201 - 120) * 128 * TOKEN_BYTES / 2**20
    assert many.mem_mb - few.mem_mb == pytest.approx(tokens_mb, abs=1)
