"""The coupling's cost model (``layerlaws.coupling.costs``): what ``svd: auto`` chooses and
what token-local products save, against counts made here by hand; the host memory planned
for a coupling job (its random twin, one prompt's measurement, the prompts' tokens); and
the estimate's GPU-hours line (``layerlaws.pipeline.planning.gpu_hours_line``)."""

from __future__ import annotations

import pytest

from layerlaws.coupling.costs import (
    FORMED,
    KEY_VALUE_SHARE,
    LAYER_ROW_DISK_BYTES,
    MATRIX_FREE,
    ROW_DISK_BYTES,
    TOKEN_BYTES,
    OutputPrompts,
    PromptShape,
    coupling_merge_needs,
    coupling_needs,
    coupling_output_bytes,
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
    "keep_arrays": "figures",
}


def prompt_set(prompts: int) -> dict:
    return {
        "texts": ["a"] * prompts,
        "n_from_dataset": 0,
        "max_tokens": 128,
        "jacobian_prompts": 100,
    }


def planned(prompts: int, keep_arrays: int | str = "figures", **options):
    """The needs of the paper's coupling of a 70B Llama (nf4, on GPUs) on ``prompts``, the
    arrays of those ``keep_arrays`` says kept."""
    return coupling_needs(
        size=LLAMA_70B,
        settings=PAPER_SETTINGS | {"keep_arrays": keep_arrays},
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
    few, many = planned(120, "all"), planned(1201, "all")
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
    outputs it writes (every prompt's arrays kept), and grows with the prompts by their
    tokens alone."""
    every = PAPER_SETTINGS | {"keep_arrays": "all"}
    few, many = (
        coupling_merge_needs(size=LLAMA_70B, settings=every, prompt_set=prompt_set(n))
        for n in (120, 1201)
    )
    assert many.gpu == 0 and many.mem_mb < 5 * 1024 < many.disk_mb / 100
    tokens_mb = (1201 - 120) * 128 * TOKEN_BYTES / 2**20
    assert many.mem_mb - few.mem_mb == pytest.approx(tokens_mb, abs=1)


STREAMS = 4 * 81 * 128 * 8192
"""One prompt's residual streams at 70B under one weights: (L + 1, T, d) float32."""
FACTORS = 4 * (2 * 8192 + 1) * 80 * 50
"""Its top-50 factors U, V (L, d, K) and S (L, K)."""
DEPTH = 4 * 80**2 * 10**2
"""Its depth coupling matrices at K = 10 (L, L, K, K)."""
TOKEN_ROWS = 3 * 128**2 * 3 * 4
"""Its token-wise rows: three kinds of T² pairs at the middle layer, each of 3 Ks and 4
metrics; its statistics (token_means.csv) one per kind, K and metric."""
MIB = 2**20


@pytest.mark.parametrize(
    ("keep", "shards", "counted"),
    [
        ("figures", 1, OutputPrompts(1201, 100, 1, 1)),
        (10, 1, OutputPrompts(1201, 100, 10, 10)),
        ("all", 1, OutputPrompts(1201, 100, 1201, 100)),
        ("figures", 4, OutputPrompts(301, 25, 1, 1)),
        ("all", 4, OutputPrompts(301, 25, 301, 25)),
    ],
)
def test_the_plan_counts_the_prompts_whose_arrays_are_kept(keep, shards, counted):
    """The set's own texts come first and have their Jacobians: the figures' prompt is the
    first; a count keeps that many; a shard holds its share, the kept at most."""
    assert OutputPrompts.of(prompt_set(1201), keep, shards) == counted


def test_a_drawn_subset_may_keep_a_second_prompt_for_the_figures():
    """Without texts of the set's own, the first prompt (its trajectories) may not be the
    first whose Jacobians are drawn (its coupling matrices)."""
    drawn = {
        "texts": [],
        "dataset": ["a", "b"],
        "n_from_dataset": 50,
        "jacobian_prompts": 6,
        "jacobian_draw": "per_dataset",
    }
    assert OutputPrompts.of(drawn, "figures") == OutputPrompts(100, 6, 2, 2)
    assert OutputPrompts.of(drawn | {"jacobian_draw": "first"}, "figures").kept == 1
    assert OutputPrompts.of(drawn, 3) == OutputPrompts(100, 6, 4, 4)


def test_a_coupling_jobs_disk_follows_the_arrays_it_keeps():
    """Keeping every prompt's arrays adds, in the outputs and in the prompts' files, the
    streams of the 1,200 others and the factors, depth matrices and token-wise rows of the
    99 others with Jacobians, under both weights; the files keep every depth matrix either
    way (the mean |A| is summed from them)."""
    kept, every = planned(1201), planned(1201, "all")
    added = 2 * (1200 * STREAMS + 99 * (FACTORS + DEPTH + TOKEN_ROWS * ROW_DISK_BYTES))
    assert (every.disk_mb - kept.disk_mb) * MIB == pytest.approx(
        2 * added - 2 * 99 * DEPTH, abs=MIB
    )
    assert kept.disk_mb * MIB < 2 * (every.disk_mb * MIB - 2 * added)  # the tables, twice


def test_the_merge_writes_the_arrays_the_setting_keeps():
    few, every = (
        coupling_merge_needs(
            size=LLAMA_70B,
            settings=PAPER_SETTINGS | {"keep_arrays": keep},
            prompt_set=prompt_set(1201),
        )
        for keep in (10, "all")
    )
    added = 2 * (1191 * STREAMS + 90 * (FACTORS + DEPTH + TOKEN_ROWS * ROW_DISK_BYTES))
    assert (every.disk_mb - few.disk_mb) * MIB == pytest.approx(added, abs=MIB)


def test_the_output_bytes_are_the_tables_and_the_kept_arrays():
    """coupling_output_bytes of the figures' prompt alone: every prompt's rows but the
    token-wise ones, which one prompt has (the others their statistics), one prompt's
    streams, factors and depth and token matrices, and the mean |A|."""
    statistics = TOKEN_ROWS // 128**2
    rows = 1201 * 128 + 100 * (80**2 * 3 * 4 + statistics + 80 * 50) + TOKEN_ROWS
    layer_rows = 1201 * 128 * 81
    arrays = STREAMS + FACTORS + 2 * DEPTH + 4 * 128**2 * 10**2
    written = coupling_output_bytes(LLAMA_70B, OutputPrompts(1201, 100, 1, 1), 128, PAPER_SETTINGS)
    assert written == 2 * (rows * ROW_DISK_BYTES + layer_rows * LAYER_ROW_DISK_BYTES + arrays)
