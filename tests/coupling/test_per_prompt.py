"""The coupling of each prompt and of each dataset of a prompt set, and the prompt-length
panel (``layerlaws.coupling.per_prompt``), against references computed here with NumPy
from per-prompt depth rows of known values: the mean of a metric over all layer pairs
and over l ≠ l′ of each prompt (Aubry et al. §5.4), its mean over each dataset's prompts
(Table 3's), and −m of each prompt against its length (Fig. 10, right)."""

from __future__ import annotations

import numpy as np
import polars as pl
import pytest

from layerlaws.coupling.per_prompt import (
    PER_DATASET_SCHEMA,
    PER_PROMPT_SCHEMA,
    dataset_coupling,
    length_panel,
    prompt_coupling,
)
from layerlaws.coupling.plots import plot_prompt_length

LAYERS, KS, METRICS, WEIGHTS = 3, (2, 4), ("paper", "unnormalised"), ("trained", "random")
DATASETS = [None, "arc", "arc", "gsm8k", "gsm8k", "gsm8k", "winogrande"]
"""The dataset of each prompt (None: the set's own text)."""
LENGTHS = [11, 30, 17, 44, 9, 25, 38]
JACOBIANS = [True, True, False, True, True, True, True]
"""Prompt 2 has its trajectories only: no depth rows."""


@pytest.fixture(scope="module")
def measured():
    """(depth table, prompts table, values[weights, prompt, k, metric, l, l′]) with random
    values of each metric, NaN for the prompt without Jacobians, and ``mean`` rows of
    nonsense the per-prompt tables must ignore."""
    rng = np.random.default_rng(7)
    values = rng.uniform(
        0.1, 2.0, (len(WEIGHTS), len(DATASETS), len(KS), len(METRICS)) + (LAYERS,) * 2
    )
    rows = []
    for w, weights in enumerate(WEIGHTS):
        for p in [p for p in range(len(DATASETS)) if JACOBIANS[p]] + ["mean"]:
            for k_index, k in enumerate(KS):
                for m, metric in enumerate(METRICS):
                    for a in range(LAYERS):
                        for b in range(LAYERS):
                            value = 99.0 if p == "mean" else values[w, p, k_index, m, a, b]
                            rows.append((weights, str(p), a + 1, b + 1, k, metric, value))
    depth = pl.DataFrame(
        rows,
        schema=["weights", "prompt", "layer_a", "layer_b", "k", "metric", "miscoupling"],
        orient="row",
    )
    prompts = pl.DataFrame(
        {
            "prompt": range(len(DATASETS)),
            "dataset": DATASETS,
            "tokens": LENGTHS,
            "jacobians": JACOBIANS,
        },
        schema_overrides={"dataset": pl.String},
    )
    values[:, ~np.array(JACOBIANS)] = np.nan
    return depth, prompts, values


def test_each_prompts_coupling_is_its_mean_over_layer_pairs(measured):
    depth, prompts, values = measured
    table = prompt_coupling(depth, prompts)
    assert table.schema == pl.Schema(PER_PROMPT_SCHEMA)
    kept = [p for p in range(len(DATASETS)) if JACOBIANS[p]]
    off = ~np.eye(LAYERS, dtype=bool)
    expected = [
        (weights, p, DATASETS[p], LENGTHS[p], k, metric)
        for weights in WEIGHTS
        for p in kept
        for k in KS
        for metric in METRICS
    ]
    assert table.select(list(PER_PROMPT_SCHEMA)[:6]).rows() == expected
    every = values[:, kept].mean(axis=(-2, -1))
    off_diagonal = values[:, kept][..., off].mean(axis=-1)
    np.testing.assert_allclose(table["miscoupling_all"].to_numpy(), every.ravel(), rtol=1e-12)
    np.testing.assert_allclose(
        table["miscoupling_offdiagonal"].to_numpy(), off_diagonal.ravel(), rtol=1e-12
    )


def test_each_datasets_coupling_is_the_mean_over_its_prompts(measured):
    depth, prompts, values = measured
    table = dataset_coupling(prompt_coupling(depth, prompts))
    assert table.schema == pl.Schema(PER_DATASET_SCHEMA)
    groups = {None: [0], "arc": [1], "gsm8k": [3, 4, 5], "winogrande": [6]}  # 2: no Jacobians
    expected_keys, every, off_diagonal, counts, lengths = [], [], [], [], []
    off = ~np.eye(LAYERS, dtype=bool)
    for w, weights in enumerate(WEIGHTS):
        for dataset, members in groups.items():
            for k_index, k in enumerate(KS):
                for m, metric in enumerate(METRICS):
                    block = values[w, members, k_index, m]  # (prompts, L, L)
                    expected_keys.append((weights, dataset, k, metric))
                    every.append(block.mean(axis=(1, 2)).mean())
                    off_diagonal.append(block[:, off].mean(axis=1).mean())
                    counts.append(len(members))
                    lengths.append(np.mean([LENGTHS[p] for p in members]))
    assert table.select("weights", "dataset", "k", "metric").rows() == expected_keys
    assert table["prompts"].to_list() == counts
    np.testing.assert_allclose(table["tokens_mean"].to_numpy(), lengths, rtol=1e-12)
    np.testing.assert_allclose(table["miscoupling_all"].to_numpy(), every, rtol=1e-12)
    np.testing.assert_allclose(
        table["miscoupling_offdiagonal"].to_numpy(), off_diagonal, rtol=1e-12
    )


def test_the_prompt_length_panel_is_minus_m_at_the_smallest_k(measured, tmp_path):
    depth, prompts, values = measured
    panel = length_panel(prompt_coupling(depth, prompts))
    kept = [p for p in range(len(DATASETS)) if JACOBIANS[p]]
    m = METRICS.index("unnormalised")
    assert panel.columns == ["weights", "prompt", "dataset", "tokens", "metric", "k", "coupling"]
    assert set(panel["metric"]) == {"unnormalised"} and set(panel["k"]) == {min(KS)}
    assert panel["prompt"].to_list() == kept * len(WEIGHTS)
    assert panel["tokens"].to_list() == [LENGTHS[p] for p in kept] * len(WEIGHTS)
    expected = -values[:, kept, 0, m].mean(axis=(-2, -1))
    np.testing.assert_allclose(panel["coupling"].to_numpy(), expected.ravel(), rtol=1e-12)
    # Without m measured, m̃ (the paper's Eq. 14).
    paper_only = length_panel(prompt_coupling(depth.filter(pl.col("metric") == "paper"), prompts))
    expected = -values[:, kept, 0, METRICS.index("paper")].mean(axis=(-2, -1))
    np.testing.assert_allclose(paper_only["coupling"].to_numpy(), expected.ravel(), rtol=1e-12)
    path = tmp_path / "prompt_length.svg"
    plot_prompt_length(
        panel, path=path, title="t", options={"format": "svg", "dpi": 50, "width": 8}
    )
    assert path.stat().st_size > 1000
