"""Model preparation: facts read from the model, tied embeddings, random twins, bad sources."""

import json

import pytest
import torch

from layerlaws.errors import LayerlawsError
from layerlaws.models import load_model, prepare_model, read_facts


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
