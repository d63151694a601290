"""Model preparation: facts read from the model, tied embeddings, random twins, bad sources."""

import json
import shutil
from pathlib import Path

import numpy as np
import pytest
import torch
from conftest import llama_tokenizer
from safetensors import safe_open
from tiny_models import save_tiny_model

from layerlaws.core.errors import LayerlawsError
from layerlaws.core.settings import SCHEMA_FILE
from layerlaws.models.facts import read_facts
from layerlaws.models.loading import embedding_matrices, load_model, load_tokenizer
from layerlaws.models.preparation import prepare_model


def test_prepare_local_model_and_its_random_twin(llama_folder, gpt2_folder, tmp_path):
    facts = prepare_model(
        {"source": {"kind": "local", "path": str(llama_folder)}}, tmp_path / "llama"
    )
    assert (facts.num_layers, facts.hidden_size, facts.norm_type) == (4, 24, "rmsnorm")
    assert facts.norm_eps == pytest.approx(1e-6)
    assert read_facts(tmp_path / "llama") == facts
    assert not facts.tied_embeddings and not facts.post_ln
    gpt2 = prepare_model({"source": {"kind": "local", "path": str(gpt2_folder)}}, tmp_path / "g")
    assert gpt2.tied_embeddings and gpt2.norm_type == "layernorm"
    assert gpt2.norm_eps == pytest.approx(1e-5)
    twin = prepare_model(
        {"source": {"kind": "local", "path": str(llama_folder)}, "init": "random", "init_seed": 5},
        tmp_path / "twin",
    )
    assert twin.source["init"] == "random"
    trained = load_model(tmp_path / "llama", "float32", "cpu").state_dict()
    random = load_model(tmp_path / "twin", "float32", "cpu").state_dict()
    name = "model.layers.0.mlp.up_proj.weight"
    assert not torch.equal(trained[name], random[name])


def test_unknown_models_give_clear_errors(tmp_path):
    # The hub is out of reach in the tests (HF_HUB_OFFLINE, conftest.py).
    with pytest.raises(LayerlawsError, match="could not load model 'no-such/model-xyz'"):
        prepare_model({"source": {"kind": "hub", "id": "no-such/model-xyz"}}, tmp_path / "a")
    with pytest.raises(LayerlawsError, match="does not exist"):
        prepare_model({"source": {"kind": "local", "path": str(tmp_path / "nope")}}, tmp_path / "b")
    with pytest.raises(LayerlawsError, match="is not installed"):
        prepare_model(
            {"source": {"kind": "gguf_package", "package": "no-such-package", "file": "x.gguf"}},
            tmp_path / "c",
        )


def test_facts_of_an_older_layerlaws_are_a_clear_error(llama_folder, tmp_path):
    prepare_model({"source": {"kind": "local", "path": str(llama_folder)}}, tmp_path / "m")
    path = tmp_path / "m" / "layerlaws_model.json"
    old = json.loads(path.read_text())
    old["hidden_states_layout"] = old.pop("post_ln")
    path.write_text(json.dumps(old))
    with pytest.raises(LayerlawsError, match=r"delete .* and rerun"):
        read_facts(tmp_path / "m")


def test_a_local_model_is_used_where_it_lies(llama_folder, tmp_path):
    facts = prepare_model({"source": {"kind": "local", "path": str(llama_folder)}}, tmp_path / "m")
    assert [path.name for path in (tmp_path / "m").iterdir()] == ["layerlaws_model.json"]
    assert facts.weights == str(llama_folder.resolve())
    assert facts.parameters == sum(
        p.numel() for p in load_model(tmp_path / "m", "float32", "cpu").parameters()
    )


def test_a_bfloat16_model_keeps_bfloat16_on_disk(texts, tmp_path):
    save_tiny_model(tmp_path / "source", "llama", llama_tokenizer(texts), dtype=torch.bfloat16)
    source = {"kind": "local", "path": str(tmp_path / "source")}
    trained = prepare_model({"source": source}, tmp_path / "trained")
    twin = prepare_model({"source": source, "init": "random"}, tmp_path / "twin")
    assert trained.weights_dtype == twin.weights_dtype == "bfloat16"
    assert twin.weights is None
    for folder in (tmp_path / "source", tmp_path / "twin"):
        with safe_open(str(folder / "model.safetensors"), framework="pt") as stored:
            dtypes = {stored.get_slice(key).get_dtype() for key in stored.keys()}  # noqa: SIM118
        assert dtypes == {"BF16"}
    assert next(load_model(tmp_path / "twin", "float32", "cpu").parameters()).dtype == torch.float32


def test_a_hub_model_is_used_from_the_hugging_face_cache(llama_folder, tmp_path):
    """The hub code path on a model already in the cache (HF_HUB_OFFLINE is set for the
    tests): the prepared folder points into the cache, nothing is copied."""
    from huggingface_hub import constants

    revision = "0123456789abcdef0123456789abcdef01234567"
    repository = Path(constants.HF_HUB_CACHE) / "models--layerlaws-test--tiny-llama"
    snapshot = repository / "snapshots" / revision
    shutil.copytree(llama_folder, snapshot)
    (repository / "refs").mkdir()
    (repository / "refs" / "main").write_text(revision)
    try:
        facts = prepare_model(
            {"source": {"kind": "hub", "id": "layerlaws-test/tiny-llama"}}, tmp_path / "m"
        )
        assert Path(facts.weights).resolve() == snapshot.resolve()
        assert [path.name for path in (tmp_path / "m").iterdir()] == ["layerlaws_model.json"]
        assert load_tokenizer(tmp_path / "m")("the set")["input_ids"]
    finally:
        shutil.rmtree(repository)


def test_a_hub_model_in_a_subfolder_of_its_repository(llama_folder, tmp_path):
    """A repository holding several models (``source.subfolder``): config, weights and
    tokenizer are read from the subfolder of the cached snapshot."""
    from huggingface_hub import constants

    revision = "89abcdef0123456789abcdef0123456789abcdef"
    repository = Path(constants.HF_HUB_CACHE) / "models--layerlaws-test--several-models"
    snapshot = repository / "snapshots" / revision
    shutil.copytree(llama_folder, snapshot / "small" / "transformers")
    (repository / "refs").mkdir()
    (repository / "refs" / "main").write_text(revision)
    source = {"kind": "hub", "id": "layerlaws-test/several-models"}
    try:
        facts = prepare_model(
            {"source": {**source, "subfolder": "small/transformers"}}, tmp_path / "m"
        )
        assert Path(facts.weights).resolve() == (snapshot / "small" / "transformers").resolve()
        assert load_model(tmp_path / "m", "float32", "cpu").config.num_hidden_layers > 0
        with pytest.raises(LayerlawsError, match="subfolder 'large'"):
            prepare_model({"source": {**source, "subfolder": "large"}}, tmp_path / "n")
    finally:
        shutil.rmtree(repository)


def test_embeddings_are_read_without_building_the_model(llama_folder, gpt2_folder, tmp_path):
    from transformers import AutoModelForCausalLM

    expected = {}
    for name, folder in (("llama", llama_folder), ("gpt2", gpt2_folder)):
        prepare_model({"source": {"kind": "local", "path": str(folder)}}, tmp_path / name)
        model = load_model(tmp_path / name, "float32", "cpu")
        expected[name] = (
            model.get_input_embeddings().weight.numpy(),
            model.get_output_embeddings().weight.numpy(),
        )

    def refuse(*args, **kwargs):
        raise AssertionError("the model was built")

    original = AutoModelForCausalLM.from_pretrained
    AutoModelForCausalLM.from_pretrained = refuse
    try:
        for name, tied in (("llama", False), ("gpt2", True)):
            input_weights, output_weights, found_tied = embedding_matrices(tmp_path / name)
            assert found_tied is tied
            np.testing.assert_array_equal(input_weights, expected[name][0])
            np.testing.assert_array_equal(output_weights, expected[name][1])
    finally:
        AutoModelForCausalLM.from_pretrained = original


def test_the_trainable_families_are_rows_of_the_table_and_what_the_config_accepts():
    import yaml

    from layerlaws.models.architectures import ARCHITECTURES
    from layerlaws.training.plan import TRAINABLE_FAMILIES

    schema = yaml.safe_load(SCHEMA_FILE.read_text())
    training = schema["properties"]["training"]["additionalProperties"]["properties"]
    assert tuple(training["architecture"]["enum"]) == TRAINABLE_FAMILIES
    assert set(TRAINABLE_FAMILIES) <= set(ARCHITECTURES)
    assert all(ARCHITECTURES[family].objective == "causal" for family in TRAINABLE_FAMILIES)
