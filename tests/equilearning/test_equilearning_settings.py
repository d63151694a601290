"""EquilearningSettings from the validated config block and from the pass's rule params:
typed values, and errors that name a missing or invalid key."""

from dataclasses import fields

import pytest
from config_blocks import rule_params, validated_block

from layerlaws.core.errors import LayerlawsError
from layerlaws.equilearning.settings import (
    EquilearningSettings,
    FuzzinessSettings,
    MaskingSettings,
    TokenViewSettings,
    run_token_views,
)


@pytest.fixture
def block():
    return validated_block("equilearning")


def test_the_default_block_arrives_with_its_types(block):
    settings = EquilearningSettings.from_config(block)
    assert settings.offsets == (-1, 0, 1, 2)
    assert settings.norms == ("model", "standardize", "none")
    assert settings.controls == ("none", "shuffled_vocab")
    assert settings.shuffle == "present"
    assert settings.shuffle_seed == 0 and settings.special_tokens == "exclude"
    assert isinstance(settings.cutoff, float) and settings.cutoff == 1e-12
    assert settings.fuzziness == FuzzinessSettings(classes="all", min_rows=20, max_classes=1000)
    assert settings.token_views == TokenViewSettings(
        groups=(("they", "them"), ("have", "had"), ("are", "is")),
        layers=(),
        max_rows=500,
        norm="model",
    )
    assert settings.masking == MaskingSettings(rate=0.15, seed=0, scheme="mask_only")


def test_the_rule_params_give_the_same_settings(block):
    params = rule_params(**block, probe="auto", dtype="float32")
    assert EquilearningSettings.from_params(params) == EquilearningSettings.from_config(block)


def test_an_integer_rate_arrives_as_a_float(block):
    given = {"rate": 1, "seed": 3, "scheme": "bert"}
    masking = MaskingSettings.from_config(given)
    assert isinstance(masking.rate, float) and masking.rate == 1.0
    assert EquilearningSettings.from_config({**block, "masking": given}).masking == masking


@pytest.mark.parametrize("key", [setting.name for setting in fields(EquilearningSettings)])
def test_a_missing_key_is_named(block, key):
    del block[key]
    with pytest.raises(LayerlawsError, match=f"^equilearning.{key} is missing"):
        EquilearningSettings.from_config(block)


@pytest.mark.parametrize(
    ("key", "value", "message"),
    [
        ("offsets", 1, r"equilearning\.offsets: expected a list"),
        ("offsets", [1, "2"], r"equilearning\.offsets: expected an integer, got '2'"),
        ("norms", ["model", "layer"], r"equilearning\.norms: expected one of .*'layer'"),
        ("controls", ["shuffled"], r"equilearning\.controls: expected one of"),
        ("shuffle_seed", True, r"equilearning\.shuffle_seed: expected an integer, got True"),
        ("cutoff", "small", r"equilearning\.cutoff: expected a number"),
        ("special_tokens", "keep", r"equilearning\.special_tokens: expected one of"),
        ("shuffle", "all", r"equilearning\.shuffle: expected one of present, vocabulary"),
        (
            "fuzziness",
            {"classes": "all", "min_rows": 2},
            r"equilearning\.fuzziness\.max_classes is missing",
        ),
        (
            "fuzziness",
            {"classes": "some", "min_rows": 2, "max_classes": 3},
            r"equilearning\.fuzziness\.classes: expected one of all, frequent",
        ),
        (
            "masking",
            {"rate": 0.15, "seed": 0, "scheme": "random"},
            r"equilearning\.masking\.scheme: expected one of mask_only, bert",
        ),
        ("fuzziness", [], r"equilearning\.fuzziness must be a mapping"),
    ],
)
def test_an_invalid_value_is_named(block, key, value, message):
    with pytest.raises(LayerlawsError, match=message):
        EquilearningSettings.from_config({**block, key: value})


def test_an_invalid_nested_value_is_named(block):
    views = {**block["token_views"], "norm": "pca"}
    with pytest.raises(LayerlawsError, match=r"equilearning\.token_views\.norm: expected one"):
        EquilearningSettings.from_config({**block, "token_views": views})
    with pytest.raises(LayerlawsError, match=r"equilearning\.masking\.seed is missing"):
        MaskingSettings.from_config({"rate": 0.15, "scheme": "bert"})


def test_a_dataset_may_name_its_own_token_view_groups():
    """He & Su pick the token views' words by corpus (Figs. S1–S3, 2, S4–S6)."""
    config = {
        "equilearning": {"token_views": validated_block("equilearning")["token_views"]},
        "datasets": {"books": {"token_view_groups": None}, "law": {"token_view_groups": [["law"]]}},
    }
    assert run_token_views(config, "books") == config["equilearning"]["token_views"]
    own = run_token_views(config, "law")
    assert own == {**config["equilearning"]["token_views"], "groups": [["law"]]}
    assert config["equilearning"]["token_views"]["groups"] != [["law"]]


def test_the_dataclass_defaults_are_the_configs(block):
    """The Python API's defaults (the dataclass's) are the config's (the schema's), so a
    notebook and a pipeline run measure the same by default."""
    assert EquilearningSettings() == EquilearningSettings.from_config(block)
    assert MaskingSettings() == EquilearningSettings.from_config(block).masking
