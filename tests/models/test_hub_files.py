"""The record of what hub repositories hold (layerlaws.models.hub_files): files told from a
listing, the paper's record read and covering every hub model of the paper config, a
listing that differs in what the pipeline reads stopping in one line, a model without a
tokenizer that names none found before the first job."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from layerlaws.core.errors import LayerlawsError
from layerlaws.core.settings import with_defaults
from layerlaws.models.hub_files import (
    HubFiles,
    HubFilesRecord,
    check_listing,
    files_of_listing,
    tokenizer_problems,
)
from layerlaws.pipeline.expansion import ExpandedConfig
from layerlaws.pipeline.layout import Layout
from layerlaws.pipeline.preflight import hub_file_problems, prepared_models
from layerlaws.pipeline.startup import hub_files_location

ROOT = Path(__file__).parents[2]
PAPER = ROOT / "configs" / "paper.yaml"
C4 = "datablations/lm1-2b8-55b-c4-repetitions"
# As the hub lists a datablations repository: one folder per model, its Megatron
# checkpoint and its transformers conversion (config and weights, no tokenizer).
DATABLATIONS = [
    ".gitattributes",
    "README.md",
    "2b855b55bc4/3431998.out",
    "2b855b55bc4/global_step52452/layer_01-model_00-model_states.pt",
    "2b855b55bc4/transformers/config.json",
    "2b855b55bc4/transformers/pytorch_model.bin",
    "2b855b9bc4/transformers/config.json",
    "2b855b9bc4/transformers/pytorch_model.bin",
]
SHARDED = [
    "config.json",
    "generation_config.json",
    "model-00001-of-00002.safetensors",
    "model-00002-of-00002.safetensors",
    "model.safetensors.index.json",
    "pytorch_model-00001-of-00002.bin",
    "pytorch_model-00002-of-00002.bin",
    "pytorch_model.bin.index.json",
    "tokenizer.json",
    "tokenizer_config.json",
    "special_tokens_map.json",
    "configuration_falcon.py",
    "modeling_falcon.py",
    "consolidated.safetensors",
]


def test_the_files_of_a_listing_are_told_apart():
    assert files_of_listing(DATABLATIONS, "2b855b55bc4/transformers") == HubFiles(
        tokenizer=False, safetensors="none", bin="single"
    )
    assert files_of_listing(DATABLATIONS, "2b855b55bc4") == HubFiles(
        tokenizer=False, safetensors="none", bin="none"
    )
    assert files_of_listing(SHARDED) == HubFiles(
        tokenizer=True, safetensors="sharded", bin="sharded", remote_code=True
    )
    # Mistral's own consolidated copy is no weights the pipeline reads.
    assert files_of_listing(["consolidated.safetensors", "tokenizer.model"]) == HubFiles(
        tokenizer=True, safetensors="none", bin="none"
    )
    assert files_of_listing(["gemma-2b.gguf", "model.safetensors"]).gguf


def paper() -> tuple[dict, HubFilesRecord]:
    config = with_defaults(yaml.safe_load(PAPER.read_text()))
    config["hub_files"] = hub_files_location(config)
    return config, HubFilesRecord.read(config["hub_files"])


def test_the_paper_record_covers_every_hub_model_and_borrows_the_c4_tokenizer():
    """Every hub model of the paper config (each revision and subfolder) is recorded, none
    lacks a tokenizer source, and the datablations models, recorded without a tokenizer
    and with one .bin file, take GPT-2's."""
    config, record = paper()
    assert config["hub_files"] == str(ROOT / "configs" / "paper_hub_files.yaml")
    expanded = ExpandedConfig.from_config(config, Layout())
    assert hub_file_problems(expanded) == []
    datablations = [
        key
        for key, model in expanded.models.items()
        if "datablations" in model["source"].get("id", "")
    ]
    assert len(datablations) == 9
    for key in datablations:
        settings = expanded.models[key]
        assert record.files(settings["source"]) == HubFiles(
            tokenizer=False, safetensors="none", bin="single"
        )
        assert settings["tokenizer"] == {"kind": "hub", "id": "openai-community/gpt2"}
    gpt2 = {"id": "openai-community/gpt2"}
    assert record.files(gpt2).tokenizer
    pythia = {"id": "EleutherAI/pythia-1b", "revision": "step143000"}
    assert record.files(pythia) == HubFiles(tokenizer=True, safetensors="none", bin="single")
    # Unverified entries say what they rest on.
    assert all(entry.verified or entry.basis for entry in record.entries)


def test_a_model_without_a_tokenizer_that_names_none_is_one_line():
    config, record = paper()
    expanded = ExpandedConfig.from_config(config, Layout())
    models = {key: dict(value) for key, value in expanded.models.items()}
    del models["gpt2-2b8-c4-9b"]["tokenizer"]
    models["acme"] = {"source": {"kind": "hub", "id": "acme/brain"}}
    keys = [*prepared_models(expanded), "acme"]
    assert tokenizer_problems(record, models, keys) == [
        f"config models.gpt2-2b8-c4-9b: hub model '{C4}' (revision main, subfolder "
        f"'2b855b9bc4/transformers') holds no tokenizer ({record.path}): set "
        "models.gpt2-2b8-c4-9b.tokenizer to the source of the tokenizer it was trained with",
        f"config models.acme: {record.path} records no files for hub model 'acme/brain' "
        "(revision main): add an entry from the repository's file listing on the hub",
    ]


SOURCE = {"kind": "hub", "id": C4, "subfolder": "2b855b55bc4/transformers"}
RECORDED = HubFiles(tokenizer=False, safetensors="none", bin="single")


def test_a_listing_that_differs_in_what_is_read_stops_in_one_line():
    check_listing("paper_hub_files.yaml", SOURCE, RECORDED, DATABLATIONS)
    with_tokenizer = [*DATABLATIONS, "2b855b55bc4/transformers/tokenizer.json"]
    with pytest.raises(LayerlawsError) as raised:
        check_listing("paper_hub_files.yaml", SOURCE, RECORDED, with_tokenizer)
    assert str(raised.value) == (
        f"hub model '{C4}' (revision main, subfolder '2b855b55bc4/transformers') differs "
        "from its record in paper_hub_files.yaml (tokenizer: recorded False, the hub lists "
        "True): update the entry in paper_hub_files.yaml from the hub's listing (and "
        "models.<key>.tokenizer where the tokenizer changed), then download again"
    )
    converted = [*DATABLATIONS, "2b855b55bc4/transformers/model.safetensors"]
    with pytest.raises(LayerlawsError, match=r"weights: recorded bin \(single\), the hub lists "):
        check_listing("paper_hub_files.yaml", SOURCE, RECORDED, converted)


def test_files_the_pipeline_never_fetches_do_not_stop_it():
    """A cache holds what a download fetched (safetensors where there are any): a record
    of both formats agrees with it, and remote code counts only when trusted."""
    recorded = HubFiles(tokenizer=True, safetensors="sharded", bin="sharded", remote_code=True)
    fetched = [name for name in SHARDED if not name.endswith((".bin", ".bin.index.json", ".py"))]
    source = {"kind": "hub", "id": "tiiuae/falcon-7b"}
    check_listing("record.yaml", source, recorded, fetched)
    with pytest.raises(LayerlawsError, match="remote_code: recorded True, the hub lists False"):
        check_listing("record.yaml", source, recorded, fetched, trust_remote_code=True)


@pytest.mark.parametrize(
    ("entry", "message"),
    [
        ({"ids": ["a/b"], "tokenizer": True, "safetensors": "one", "bin": "none"}, "safetensors"),
        ({"ids": ["a/b"], "tokenizer": True, "safetensors": "single", "bin": "none"}, "basis"),
        (
            {"ids": ["a/b"], "tokenizer": 1, "safetensors": "single", "bin": "none", "basis": "x"},
            "tokenizer is 1",
        ),
        (
            {"ids": ["a/b"], "tokenizer": True, "safetensors": "single", "bin": "none",
             "verified": True},
            "give the listing",
        ),
    ],
)  # fmt: skip
def test_a_malformed_entry_is_one_line_naming_it(tmp_path, entry, message):
    path = tmp_path / "hub_files.yaml"
    path.write_text(yaml.safe_dump({"repositories": [entry]}))
    with pytest.raises(LayerlawsError, match=message) as raised:
        HubFilesRecord.read(path)
    assert str(raised.value).startswith(f"{path}: repositories[0]")
    assert "\n" not in str(raised.value)
