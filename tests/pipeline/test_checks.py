"""The config cross-checks: each message, from the real config.yaml with one key broken."""

import copy
import re
from pathlib import Path

import pytest
import yaml
from snakemake.utils import validate

from layerlaws.core.errors import LayerlawsError
from layerlaws.core.settings import SCHEMA_FILE
from layerlaws.pipeline.expansion import ExpandedConfig

REPO = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def validated():
    """config.yaml with the schema's defaults, as the workflow validates it."""
    config = yaml.safe_load((REPO / "config.yaml").read_text())
    validate(config, str(SCHEMA_FILE))
    return config


@pytest.fixture
def config(validated):
    return copy.deepcopy(validated)


def fails(config, message):
    with pytest.raises(LayerlawsError, match=re.escape(message)):
        ExpandedConfig.from_config(config)


def test_the_real_config_passes(config):
    expanded = ExpandedConfig.from_config(config)
    assert "wiki-llama@step0" in expanded.models
    assert config == ExpandedConfig.from_config(config).config  # left as it was


def test_a_training_names_a_known_tokenizer_model(config):
    config["training"]["wiki-llama"]["tokenizer"] = "nope"
    fails(config, "config training.wiki-llama.tokenizer is 'nope', which is not a key of models")


def test_a_series_names_known_datasets(config):
    config["series"]["wiki-llama"]["datasets"] = ["nope"]
    fails(config, "config series.wiki-llama.datasets names 'nope'; known: ['wiki-culture'")


def test_a_series_leaves_out_of_its_fits_only_its_members(config):
    config["series"]["wiki-llama"]["exclude_from_fits"] = ["wiki-llama@step0"]
    ExpandedConfig.from_config(config)
    config["series"]["wiki-llama"]["exclude_from_fits"] = ["smollm2-135m"]
    fails(
        config,
        "config series.wiki-llama.exclude_from_fits names 'smollm2-135m', which is not a "
        "member of the series; its models: ['wiki-llama']",
    )


def test_a_run_names_a_known_model(config):
    config["runs"].append({"model": "nope", "dataset": "wiki-science"})
    fails(config, "config runs[2].model is 'nope', which is not a key of models; known models:")


def test_a_pool_may_not_share_a_dataset_name(config):
    config["signatures"]["pools"]["wiki-science"] = ["wiki-culture"]
    fails(config, "config signatures.pools.wiki-science: a pool may not share its name with a")


def test_a_pool_names_known_datasets(config):
    config["signatures"]["pools"]["wikipedia"].append("nope")
    fails(config, "config signatures.pools.wikipedia names 'nope', which is not a key of datasets")


def test_a_signature_run_names_a_known_model(config):
    config["signatures"]["runs"][0]["model"] = "nope"
    fails(config, "config signatures.runs[0].model is 'nope', which is not a key of models")


def test_a_signature_run_names_a_dataset_or_pool(config):
    config["signatures"]["runs"][0]["dataset"] = "nope"
    fails(config, "config signatures.runs[0].dataset is 'nope', which is neither a dataset nor")


def test_a_prompt_set_names_known_datasets(config):
    config["coupling"]["prompts"]["paper"]["dataset"] = "nope"
    fails(config, "config coupling.prompts.paper.dataset is 'nope', which is not a key of")


def test_a_coupling_run_names_a_known_prompt_set(config):
    config["coupling"]["runs"][0]["prompts"] = "nope"
    fails(
        config,
        "config coupling.runs[0].prompts is 'nope', which is not a key of coupling.prompts; "
        "known coupling.prompts: ['paper']",
    )
