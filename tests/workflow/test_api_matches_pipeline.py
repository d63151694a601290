"""The notebook API on a config gives the pipeline's tables of it: the tiny workflow's
config read with ``api.Config.load``, its model loaded, its sample, corpus and prompt set
measured through ``layerlaws.api``, against the files Snakemake wrote for the same run (to
float rounding, 1e-5: the float32 forward passes run in batches of their own)."""

from __future__ import annotations

import numpy as np
import polars as pl
import pytest

from layerlaws import api
from layerlaws.core.errors import LayerlawsError

pytestmark = pytest.mark.slow

MODEL = "tiny-llama"


def assert_same_rows(
    pipeline: pl.DataFrame, measured: pl.DataFrame, keys: list[str], atol: float = 1e-7
) -> None:
    """Every row of ``pipeline`` is in ``measured`` with the same values (to 1e-5 relative,
    ``atol`` absolute): the same key set, and every numeric column compared as a whole
    array."""
    assert measured.height == pipeline.height > 0
    joined = pipeline.join(measured, on=keys, how="full", suffix="_api", nulls_equal=True)
    assert joined.height == pipeline.height, "the key columns do not match one to one"
    for column in pipeline.columns:
        if column in keys:
            continue
        expected, found = joined[column], joined[f"{column}_api"]
        if expected.dtype.is_numeric():
            np.testing.assert_allclose(
                found.to_numpy().astype(float),
                expected.to_numpy().astype(float),
                rtol=1e-5,
                atol=atol,
                err_msg=column,
            )
        else:
            assert found.to_list() == expected.to_list(), column


@pytest.fixture(scope="module")
def config(finished):
    return api.Config.load(finished / "config.yaml")


@pytest.fixture(scope="module")
def loaded(finished, config):
    """The model as the equi-learning and signature jobs load it, from the folder the
    pipeline prepared it in."""
    return config.load_model(MODEL, folder=finished / "results/models" / MODEL)


@pytest.fixture(scope="module")
def eager(config):
    """The model as a coupling job loads it: eager attention, for the Jacobians."""
    return config.load_model(MODEL, attention="eager", stage="coupling")


def test_the_law_of_the_configs_sample(finished, config, loaded):
    model, tokenizer = loaded
    folder = finished / "results/equilearning" / MODEL / "mini"
    law = api.equilearning_law(
        model, tokenizer, config.texts("mini"), config.equilearning, progress=False
    )
    keys = {
        "pr": ["layer", "offset", "norm", "control"],
        "law": ["offset", "norm", "control"],
        "fuzziness": ["layer", "norm"],
        "token_views": ["group", "word", "layer", "sentence_id", "position"],
    }
    for name, key in keys.items():
        assert_same_rows(pl.read_csv(folder / f"{name}.csv"), getattr(law, name), key)


def test_the_signatures_of_the_configs_corpus(finished, config, loaded):
    model, tokenizer = loaded
    found = api.signatures(model, tokenizer, config.corpus("mini"), config.signatures)
    folder = finished / "results/signatures" / MODEL / "mini"
    assert_same_rows(pl.read_csv(folder / "rcos.csv"), found.rcos, ["matrix", "signature"])


def test_the_coupling_of_the_configs_prompts(finished, config, eager):
    model, tokenizer = eager
    folder = finished / "results/coupling" / MODEL / "few"
    prompts = config.prompts("few")
    twin = api.random_twin(model, config.coupling.init_seed)
    tables = {
        name: pl.read_csv(folder / path, schema_overrides={"prompt": pl.String})
        for name, path in (
            ("depth", "depth.csv"),
            ("tokens", "tokens.csv"),
            ("token_means", "token_means.csv"),
            ("trajectories", "trajectories/tokens.csv"),
            ("layers", "trajectories/layers.csv"),
        )
    }
    keys = {
        "depth": ["layer_a", "layer_b", "k", "metric"],
        "tokens": ["layer_a", "layer_b", "kind", "token_a", "token_b", "k", "metric"],
        "token_means": ["layer_a", "layer_b", "kind", "k", "metric"],
        "trajectories": ["token"],
        "layers": ["token", "layer"],
    }
    assert len(prompts.texts) == 2
    for weights, measured_model in (("trained", model), ("random", twin)):
        for index, text in enumerate(prompts.texts):
            measured = api.coupling(
                measured_model,
                tokenizer,
                text,
                config.coupling,
                max_tokens=prompts.max_tokens,
                too_long=prompts.too_long,
            )
            for name, table in tables.items():
                rows = table.filter(
                    (pl.col("weights") == weights) & (pl.col("prompt") == str(index))
                ).drop("weights", "prompt", "text", strict=False)
                if name == "tokens" and index:  # the figures' prompt's alone (keep_arrays)
                    assert rows.is_empty()
                    continue
                expected = (
                    pl.DataFrame(measured.measured.token_means)
                    if name == "token_means"
                    else getattr(measured, name)
                )
                # Float32 Jacobians, multiplied on other threads: the singular vectors of
                # close singular values move by more than the rounding (up to 4e-5 here).
                assert_same_rows(rows, expected, keys[name], atol=1e-4)


def test_each_coupling_kind_alone(config, eager):
    model, tokenizer = eager
    prompt = config.prompts("few").texts[0]
    every = api.coupling(model, tokenizer, prompt, config.coupling, max_tokens=8)
    for kind, table in (("depth", "depth"), ("tokens", "tokens"), ("trajectories", "trajectories")):
        alone = api.coupling(model, tokenizer, prompt, config.coupling, max_tokens=8, kinds=[kind])
        assert getattr(alone, table).equals(getattr(every, table)), kind
        others = {"depth", "tokens", "trajectories"} - {table}
        assert all(getattr(alone, other).is_empty() for other in others), kind
    lens = api.coupling(
        model, tokenizer, prompt, config.coupling, max_tokens=8, kinds=["logit_lens"]
    )
    assert lens.layers.equals(
        every.layers.select("token", "layer", "logit_entropy", "next_token_loss")
    )
    assert lens.depth.is_empty() and lens.trajectories.is_empty()
    with pytest.raises(
        LayerlawsError, match=r"coupling kinds \['jacobians'\]: measure one or more"
    ):
        api.coupling(model, tokenizer, prompt, config.coupling, kinds=["jacobians"])
