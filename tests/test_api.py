"""The Python API example of docs/development.md, run as written on a tiny model, and its results
checked against the pipeline's own functions."""

from __future__ import annotations

import re

import numpy as np
import polars as pl
import pytest
import torch
import yaml
from fake_hub import cached_snapshot
from snakemake_runs import REPO

from layerlaws import api
from layerlaws.core.errors import LayerlawsError
from layerlaws.models.loading import load_model, load_tokenizer


@pytest.fixture(scope="module")
def in_memory(llama_folder, texts):
    model = load_model(llama_folder, "float32", "cpu", attention="eager")
    return model, load_tokenizer(llama_folder), texts[:40]


def documented_example() -> str:
    page = (REPO / "docs" / "development.md").read_text()
    section = page.split("## Python API", 1)[1]
    return re.search(r"```python\n(.*?)```", section, re.DOTALL).group(1)


def test_the_documented_example_runs(in_memory, capsys):
    model, tokenizer, texts = in_memory
    exec(documented_example(), {"model": model, "tokenizer": tokenizer, "texts": texts})
    printed = capsys.readouterr().out
    assert "pearson" in printed and "r_cos" in printed


def test_the_api_matches_the_pipeline_functions(in_memory):
    model, tokenizer, texts = in_memory
    law = api.equilearning_law(
        model, tokenizer, texts, api.EquilearningSettings(offsets=(0, 1), norms=("none",))
    )
    assert law.pr.columns == ["layer", "offset", "norm", "control", "pr", "n_rows"]
    assert len(law.pr) == 5 * 2 * 2 and law.pr["pr"].is_between(0, 1).all()
    assert set(law.law["offset"]) == {0, 1}
    # The pipeline's pass: fuzziness of every layer and its fit, the held-out loss of the
    # model's own head, the probe it resolved.
    assert law.fuzziness["layer"].to_list() == list(range(5))
    assert np.isfinite(law.fuzziness["fuzziness"].to_numpy()).all()
    assert law.fuzziness_law.height == 1
    assert np.isfinite(law.evaluation["loss"].to_numpy()).all()
    assert law.report["probe"] == "next_token" and law.report["n_rows"] > 0
    found = api.signatures(model, tokenizer, texts, api.SignatureSettings(top_tokens=30))
    assert found.summary["n_tokens"] <= 30 and found.rcos["r_cos"].is_between(-1, 1).all()
    measured = api.coupling(
        model,
        tokenizer,
        texts[0][:60],
        api.CouplingSettings(ks=(2,), token_layers=((1, 2),), metrics=("paper", "released_norm")),
    )
    depth = measured.depth
    assert isinstance(depth, pl.DataFrame)
    assert depth.equals(pl.DataFrame(measured.measured.depth))
    assert set(depth["metric"]) == {"paper", "released_norm"}
    assert depth.filter(pl.col("metric") == "paper")["miscoupling"].is_between(0, 1).all()
    assert len(depth) == 2 * 4 * 4  # metrics × layer pairs of the tiny model's 4 blocks
    assert set(measured.tokens.select("layer_a", "layer_b").unique().rows()) == {(1, 2)}
    assert np.isfinite(measured.trajectories["lss"].to_numpy()).all()


def test_more_singular_vectors_than_the_hidden_size_are_refused(in_memory):
    model, tokenizer, _ = in_memory
    with pytest.raises(LayerlawsError, match=r"coupling\.ks holds K = 50, more singular vectors"):
        api.coupling(model, tokenizer, "the set", api.CouplingSettings())


def test_too_few_texts_are_refused_before_the_model_runs(in_memory):
    """The pipeline's row check: as many rows as features make PR meaningless."""
    model, tokenizer, texts = in_memory
    with pytest.raises(LayerlawsError, match="regression rows for target offset"):
        api.equilearning_law(model, tokenizer, [texts[0][:40]], progress=False)


def test_the_random_twin_is_the_same_architecture_with_fresh_weights(in_memory):
    model, _, _ = in_memory
    twin = api.random_twin(model, seed=1)
    assert twin.config.to_dict() == model.config.to_dict()
    trained = dict(model.named_parameters())
    fresh = dict(twin.named_parameters())
    assert fresh.keys() == trained.keys()
    assert not torch.equal(
        fresh["model.layers.0.mlp.up_proj.weight"], trained["model.layers.0.mlp.up_proj.weight"]
    )
    again = api.random_twin(model, seed=1)
    for name, weight in again.named_parameters():
        assert torch.equal(weight, fresh[name]), name


def test_the_embedded_config_gives_make_runs_settings():
    """No argument: config.yaml, read here without the library, as make run measures it."""
    written = yaml.safe_load((REPO / "config.yaml").read_text())
    config = api.Config.load()
    assert config.equilearning.norms == tuple(written["equilearning"]["norms"])
    assert config.coupling.metrics == tuple(written["coupling"]["metrics"])
    assert config.signatures.top_tokens == written["signatures"]["top_tokens"]
    sample = config.texts("wiki-science")
    assert len(sample.texts) == written["datasets"]["wiki-science"]["n_samples"]
    assert sample.max_tokens == written["datasets"]["wiki-science"]["max_tokens"]
    prompts = config.prompts("paper")
    assert prompts.texts[0] == written["coupling"]["prompts"]["paper"]["texts"][0]
    assert len(prompts.texts) == 1 + written["coupling"]["prompts"]["paper"]["n_from_dataset"]
    assert [spec.name for spec in config.observers("smollm2-135m")] == ["geometry"]


def test_a_block_alone_is_a_config_of_schema_defaults():
    config = api.Config.load({"coupling": {"ks": [10], "metrics": ["paper"]}})
    assert config.coupling == api.CouplingSettings(ks=(10,), metrics=("paper",))
    assert config.equilearning == api.EquilearningSettings()


def test_a_bad_config_names_its_key_and_a_missing_entry_the_keys_there_are(tmp_path):
    with pytest.raises(LayerlawsError, match=r"coupling\.ks\[0\]: 0 is less than the minimum"):
        api.Config.load({"coupling": {"ks": [0]}})
    written = tmp_path / "my.yaml"
    written.write_text("equilearning:\n  norms: [model]\n  norms: [none]\n")
    with pytest.raises(LayerlawsError, match="line 3: the key 'norms' is given twice"):
        api.Config.load(written)
    config = api.Config.load({})
    for call, name in ((config.load_model, "model"), (config.texts, "dataset")):
        with pytest.raises(LayerlawsError, match=f"the config has no {name} 'nope'"):
            call("nope")


def test_the_configs_models_load_as_prepared(llama_folder, texts):
    """A local folder, its random twin (init: random) and a hub snapshot of it in the cache,
    each loaded with its tokenizer and the config's dtype."""
    local = {"kind": "local", "path": str(llama_folder)}
    with cached_snapshot(llama_folder, "someone/tiny-llama", "a" * 40):
        config = api.Config.load(
            {
                "models": {
                    "local": {"source": local, "dtype": "bfloat16"},
                    "random": {"source": local, "init": "random", "init_seed": 3},
                    "hub": {"source": {"kind": "hub", "id": "someone/tiny-llama"}},
                }
            }
        )
        hub, _ = config.load_model("hub")
    trained, tokenizer = config.load_model("local")
    random, _ = config.load_model("random")
    assert trained.dtype == torch.bfloat16 and random.dtype == torch.float32
    assert tokenizer(texts[0])["input_ids"] == load_tokenizer(llama_folder)(texts[0])["input_ids"]
    reference = load_model(llama_folder, "float32", "cpu")
    weights = "model.layers.0.mlp.up_proj.weight"
    expected = dict(reference.named_parameters())[weights]
    torch.testing.assert_close(dict(hub.named_parameters())[weights], expected, rtol=0, atol=0)
    torch.testing.assert_close(
        dict(trained.named_parameters())[weights].float(), expected, rtol=0, atol=0.01
    )
    assert not torch.equal(dict(random.named_parameters())[weights], expected)


def test_a_checkpoint_not_trained_here_says_how_to_train_it(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    config = api.Config.load(REPO / "config.yaml")
    with pytest.raises(LayerlawsError, match=r"wiki-llama@step800 is step 800 of the training"):
        config.load_model("wiki-llama@step800")


def test_a_model_prepared_into_a_folder_is_kept_and_loaded_from_it_again(llama_folder, tmp_path):
    local = {"kind": "local", "path": str(llama_folder)}
    config = api.Config.load(
        {"models": {"a": {"source": local}, "b": {"source": local, "init": "random"}}}
    )
    folder = tmp_path / "prepared"
    first, _ = config.load_model("a", folder=folder)
    facts = folder / "layerlaws_model.json"
    written = facts.stat().st_mtime_ns
    again, _ = config.load_model("a", folder=folder)
    assert facts.stat().st_mtime_ns == written  # loaded as it is, not prepared again
    for name, weight in again.named_parameters():
        assert torch.equal(weight, dict(first.named_parameters())[name]), name
    with pytest.raises(LayerlawsError, match=r"holds a model prepared from .*'init': 'trained'"):
        config.load_model("b", folder=folder)
    with pytest.raises(LayerlawsError, match="is not a prepared model folder"):
        config.load_model("a", folder=tmp_path)
