"""Model preparation: facts read from the model, tied embeddings, random twins, bad sources."""

import json
import re
import shutil
from pathlib import Path

import numpy as np
import pytest
import torch
from conftest import llama_tokenizer
from fake_hub import cached_snapshot
from safetensors import safe_open
from tiny_models import save_tiny_model

from layerlaws.core.errors import LayerlawsError
from layerlaws.core.settings import SCHEMA_FILE
from layerlaws.models.facts import read_facts
from layerlaws.models.loading import (
    coupling_twins,
    embedding_matrices,
    load_model,
    load_tokenizer,
)
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


def fresh_weights(folder: Path, seed: int) -> dict[str, torch.Tensor]:
    """transformers' own initialisation of the config in ``folder`` under
    ``torch.manual_seed(seed)``, in float32."""
    from transformers import AutoConfig, AutoModelForCausalLM

    torch.manual_seed(seed)
    config = AutoConfig.from_pretrained(folder)
    return AutoModelForCausalLM.from_config(config, dtype=torch.float32).state_dict()


def test_a_random_twin_is_drawn_from_its_init_seed(llama_folder, tmp_path):
    """``models.<key>.init_seed`` (a prepared random model) and ``coupling.init_seed`` (the
    coupling's twin) at seeds other than 0: each twin is a fresh initialisation of the
    model's config under that seed, and another seed draws other weights."""
    source = {"kind": "local", "path": str(llama_folder)}
    prepare_model({"source": source, "init": "random", "init_seed": 5}, tmp_path / "twin")
    prepared = load_model(tmp_path / "twin", "float32", "cpu").state_dict()
    coupled = coupling_twins(llama_folder, None, "float32", "cpu", init_seed=3)["random"]
    for seed, twin in ((5, prepared), (3, coupled.state_dict())):
        expected = fresh_weights(llama_folder, seed)
        assert twin.keys() == expected.keys() and expected
        for name, tensor in expected.items():
            assert torch.equal(twin[name], tensor), (seed, name)
    name = "model.layers.0.mlp.up_proj.weight"
    assert not torch.equal(prepared[name], coupled.state_dict()[name])


def test_unknown_models_give_clear_errors(tmp_path):
    # The hub is out of reach in the tests (HF_HUB_OFFLINE, conftest.py).
    with pytest.raises(LayerlawsError, match=r"model 'no-such/model-xyz' .* is not in the"):
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
    revision = "0123456789abcdef0123456789abcdef01234567"
    with cached_snapshot(llama_folder, "layerlaws-test/tiny-llama", revision) as snapshot:
        facts = prepare_model(
            {"source": {"kind": "hub", "id": "layerlaws-test/tiny-llama"}}, tmp_path / "m"
        )
        assert Path(facts.weights).resolve() == snapshot.resolve()
        assert [path.name for path in (tmp_path / "m").iterdir()] == ["layerlaws_model.json"]
        assert load_tokenizer(tmp_path / "m")("the set")["input_ids"]


def test_a_hub_revision_is_the_snapshot_its_ref_names(llama_folder, gpt2_folder, tmp_path):
    """``source.revision`` (and ``models.<key>.revisions``, Pythia's step checkpoints): a
    repository with two refs in the cache, each naming its own commit's snapshot (here a
    Llama and a GPT-2); each revision is prepared from its own."""
    from huggingface_hub import constants

    model_id = "layerlaws-test/two-revisions"
    repository = Path(constants.HF_HUB_CACHE) / f"models--{model_id.replace('/', '--')}"
    snapshots = {"step1": ("1" * 40, llama_folder), "step2": ("2" * 40, gpt2_folder)}
    (repository / "refs").mkdir(parents=True)
    try:
        for revision, (commit, folder) in snapshots.items():
            shutil.copytree(folder, repository / "snapshots" / commit)
            (repository / "refs" / revision).write_text(commit)
        for revision, (commit, _) in snapshots.items():
            source = {"kind": "hub", "id": model_id, "revision": revision}
            facts = prepare_model({"source": source}, tmp_path / revision)
            expected = (repository / "snapshots" / commit).resolve()
            assert Path(facts.weights).resolve() == expected
        kinds = [read_facts(tmp_path / revision).model_type for revision in snapshots]
        assert kinds == ["llama", "gpt2"]
    finally:
        shutil.rmtree(repository)


def test_a_hub_model_in_a_subfolder_of_its_repository(llama_folder, tmp_path):
    """A repository holding several models (``source.subfolder``): config, weights and
    tokenizer are read from the subfolder of the cached snapshot."""
    revision = "89abcdef0123456789abcdef0123456789abcdef"
    source = {"kind": "hub", "id": "layerlaws-test/several-models"}
    with cached_snapshot(llama_folder, source["id"], revision, "small/transformers") as snapshot:
        facts = prepare_model(
            {"source": {**source, "subfolder": "small/transformers"}}, tmp_path / "m"
        )
        assert Path(facts.weights).resolve() == (snapshot / "small" / "transformers").resolve()
        assert load_model(tmp_path / "m", "float32", "cpu").config.num_hidden_layers > 0
        with pytest.raises(LayerlawsError, match="subfolder 'large'"):
            prepare_model({"source": {**source, "subfolder": "large"}}, tmp_path / "n")


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


def _truncated(file: Path) -> Path:
    """``file`` cut to half its length, as an interrupted download or copy leaves it."""
    data = file.read_bytes()
    file.write_bytes(data[: len(data) // 2])
    return file


def test_a_truncated_safetensors_file_is_a_clear_error(llama_folder, tmp_path):
    """Named with its cause wherever it is read: preparing, loading, the embeddings."""
    source = {"kind": "local", "path": str(shutil.copytree(llama_folder, tmp_path / "source"))}
    prepare_model({"source": source}, tmp_path / "m")
    weights = _truncated(tmp_path / "source" / "model.safetensors")
    damaged = rf"{re.escape(str(weights))} is corrupt or truncated \(.*incomplete metadata"
    for read in (
        lambda: prepare_model({"source": source}, tmp_path / "again"),
        lambda: load_model(tmp_path / "m", "float32", "cpu"),
        lambda: embedding_matrices(tmp_path / "m"),
    ):
        with pytest.raises(LayerlawsError, match=damaged):
            read()
    assert not (tmp_path / "again").exists()


def test_a_truncated_file_in_the_hugging_face_cache_is_to_be_deleted(llama_folder, tmp_path):
    revision = "fedcba9876543210fedcba9876543210fedcba98"
    with cached_snapshot(llama_folder, "layerlaws-test/truncated", revision) as snapshot:
        weights = _truncated(snapshot / "model.safetensors")
        with pytest.raises(LayerlawsError, match=rf"{re.escape(str(weights))} is corrupt.*delete"):
            prepare_model(
                {"source": {"kind": "hub", "id": "layerlaws-test/truncated"}}, tmp_path / "m"
            )


def _tiny_gguf(path: Path) -> Path:
    """A GGUF file of one tensor (no model transformers can build, but a sound file)."""
    import gguf

    writer = gguf.GGUFWriter(str(path), "llama")
    writer.add_block_count(1)
    writer.add_tensor("token_embd.weight", np.ones((64, 16), dtype=np.float32))
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    return path


def test_a_gguf_file_that_is_garbage_or_truncated_is_a_clear_error(tmp_path):
    garbage = tmp_path / "garbage.gguf"
    garbage.write_bytes(b"<html>404 Not Found</html>\n" * 20)
    truncated = _truncated(_tiny_gguf(tmp_path / "truncated.gguf"))
    for path in (garbage, truncated):
        with pytest.raises(LayerlawsError, match=rf"{re.escape(str(path))} is corrupt or trunc"):
            prepare_model({"source": {"kind": "gguf_file", "path": str(path)}}, tmp_path / "m")
    # A sound file that transformers fails on for another reason is no "corrupt file".
    sound = _tiny_gguf(tmp_path / "sound.gguf")
    with pytest.raises(Exception) as raised:
        prepare_model({"source": {"kind": "gguf_file", "path": str(sound)}}, tmp_path / "m")
    assert not isinstance(raised.value, LayerlawsError)
    assert not (tmp_path / "m").exists()


def test_a_config_json_that_is_not_json_is_a_clear_error(llama_folder, tmp_path):
    folder = shutil.copytree(llama_folder, tmp_path / "source")
    (folder / "config.json").write_text('{"model_type": "llama",\n  "hidden_size": 24,,\n}')
    config = re.escape(str(folder / "config.json"))
    with pytest.raises(LayerlawsError, match=rf"config {config} is not valid JSON \(.* line 2,"):
        prepare_model({"source": {"kind": "local", "path": str(folder)}}, tmp_path / "m")
