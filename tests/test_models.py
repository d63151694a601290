"""Model preparation: architecture facts, tied embeddings, random twins, bad sources."""

import pytest
import torch
from transformers import GPT2Config, LlamaConfig, MambaConfig

from layerlaws.errors import LayerlawsError
from layerlaws.models import (
    BLOCKS_THEN_FINAL_NORM,
    EMBEDDINGS_FIRST,
    architecture_of,
    load_model,
    prepare_model,
    read_facts,
)


def test_architecture_table():
    assert architecture_of(LlamaConfig()).norm_type == "rmsnorm"
    assert architecture_of(GPT2Config()).norm_type == "layernorm"
    assert architecture_of(GPT2Config()).hidden_states_layout == EMBEDDINGS_FIRST
    assert architecture_of(MambaConfig()).hidden_states_layout == BLOCKS_THEN_FINAL_NORM


def test_prepare_local_model_and_its_random_twin(llama_folder, gpt2_folder, tmp_path):
    facts = prepare_model(
        {"source": {"kind": "local", "path": str(llama_folder)}}, tmp_path / "llama"
    )
    assert (facts.num_layers, facts.hidden_size, facts.norm_type) == (4, 24, "rmsnorm")
    assert facts.norm_eps == pytest.approx(1e-6)
    assert read_facts(tmp_path / "llama") == facts
    assert not facts.tied_embeddings
    gpt2 = prepare_model({"source": {"kind": "local", "path": str(gpt2_folder)}}, tmp_path / "g")
    assert gpt2.tied_embeddings and gpt2.norm_type == "layernorm"
    twin = prepare_model(
        {"source": {"kind": "local", "path": str(llama_folder)}, "init": "random", "init_seed": 5},
        tmp_path / "twin",
    )
    assert twin.source["init"] == "random"
    trained = load_model(tmp_path / "llama", "float32", "cpu").state_dict()
    random = load_model(tmp_path / "twin", "float32", "cpu").state_dict()
    name = "model.layers.0.mlp.up_proj.weight"
    assert not torch.equal(trained[name], random[name])


def test_unknown_models_give_clear_errors(tmp_path, monkeypatch):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    with pytest.raises(LayerlawsError, match="could not load model 'no-such/model-xyz'"):
        prepare_model({"source": {"kind": "hub", "id": "no-such/model-xyz"}}, tmp_path / "a")
    with pytest.raises(LayerlawsError, match="does not exist"):
        prepare_model({"source": {"kind": "local", "path": str(tmp_path / "nope")}}, tmp_path / "b")
    with pytest.raises(LayerlawsError, match="is not installed"):
        prepare_model(
            {"source": {"kind": "gguf_package", "package": "no-such-package", "file": "x.gguf"}},
            tmp_path / "c",
        )
