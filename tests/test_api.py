"""The README's Python API example, run as written on a tiny model, and its results
checked against the pipeline's own functions."""

from __future__ import annotations

import re

import numpy as np
import polars as pl
import pytest
from snakemake_runs import REPO

from layerlaws import api
from layerlaws.models.loading import load_model, load_tokenizer


@pytest.fixture(scope="module")
def in_memory(llama_folder, texts):
    model = load_model(llama_folder, "float32", "cpu", attention="eager")
    return model, load_tokenizer(llama_folder), texts[:40]


def readme_example() -> str:
    readme = (REPO / "README.md").read_text()
    section = readme.split("## Python API", 1)[1]
    return re.search(r"```python\n(.*?)```", section, re.DOTALL).group(1)


def test_the_readme_example_runs(in_memory, capsys):
    model, tokenizer, texts = in_memory
    exec(readme_example(), {"model": model, "tokenizer": tokenizer, "texts": texts})
    printed = capsys.readouterr().out
    assert "pearson" in printed and "r_cos" in printed


def test_the_api_matches_the_pipeline_functions(in_memory):
    model, tokenizer, texts = in_memory
    law = api.equilearning_law(model, tokenizer, texts, offsets=[0, 1], norms=["none"])
    assert law.pr.columns == ["layer", "offset", "norm", "control", "pr", "n_rows"]
    assert len(law.pr) == 5 * 2 and law.pr["pr"].is_between(0, 1).all()
    assert set(law.law["offset"]) == {0, 1}
    found = api.signatures(model, tokenizer, texts, top_tokens=30)
    assert found.summary["n_tokens"] <= 30 and found.rcos["r_cos"].is_between(-1, 1).all()
    measured = api.coupling(
        model,
        tokenizer,
        texts[0][:60],
        ks=[2],
        token_layers=[[1, 2]],
        metrics=["paper", "released_norm"],
    )
    depth = pl.DataFrame(measured.depth)
    assert set(depth["metric"]) == {"paper", "released_norm"}
    assert depth.filter(pl.col("metric") == "paper")["miscoupling"].is_between(0, 1).all()
    assert len(depth) == 2 * 4 * 4  # metrics × layer pairs of the tiny model's 4 blocks
    assert {(row["layer_a"], row["layer_b"]) for row in measured.tokens} == {(1, 2)}
    assert np.isfinite([row["lss"] for row in measured.trajectories]).all()
