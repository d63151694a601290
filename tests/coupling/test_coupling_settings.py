"""CouplingSettings from the validated config block and from the measuring rule's params:
typed values, and errors that name a missing or invalid key."""

from dataclasses import fields

import pytest
from config_blocks import rule_params, validated_block

from layerlaws.core.errors import LayerlawsError
from layerlaws.coupling.measurement import TokenCoupling
from layerlaws.coupling.settings import CouplingSettings


@pytest.fixture
def block():
    return validated_block("coupling")


def test_the_default_block_arrives_with_its_types_and_equals_the_defaults(block):
    settings = CouplingSettings.from_config(block)
    assert settings == CouplingSettings()
    assert settings.ks == (10, 30, 50) and settings.token_layers == ()
    assert settings.final_norm == "in_last_block" and settings.includes_final_norm
    assert not CouplingSettings(final_norm="excluded").includes_final_norm


def test_the_rule_params_give_the_same_settings(block):
    params = rule_params(
        **{key: value for key, value in block.items() if key not in ("runs", "prompts")},
        prompts=block["prompts"]["paper"],
        dtype="float32",
    )
    assert CouplingSettings.from_params(params) == CouplingSettings.from_config(block)


def test_token_layers_and_their_coupling(block):
    settings = CouplingSettings.from_config({**block, "token_layers": [3, [1, 4]]})
    assert settings.token_layers == (3, (1, 4))
    coupling = TokenCoupling.of(settings, num_layers=4)
    assert coupling == TokenCoupling(((3, 3), (1, 4)), 0, -1)
    assert TokenCoupling.of(CouplingSettings(), num_layers=6).layer_pairs == ((3, 3),)


@pytest.mark.parametrize("key", [setting.name for setting in fields(CouplingSettings)])
def test_a_missing_key_is_named(block, key):
    del block[key]
    with pytest.raises(LayerlawsError, match=f"^coupling.{key} is missing"):
        CouplingSettings.from_config(block)


@pytest.mark.parametrize(
    ("key", "value", "message"),
    [
        ("ks", [10, 2.5], r"coupling\.ks: expected an integer, got 2\.5"),
        ("token_layers", [[1, 2, 3]], r"coupling\.token_layers: .*a list of 2 items"),
        ("final_norm", True, r"coupling\.final_norm: expected one of in_last_block, excluded"),
        ("svd", "lanczos", r"coupling\.svd: expected one of full, randomized"),
        ("fixed_output_token", "-1", r"coupling\.fixed_output_token: expected an integer"),
        ("lss_window", None, r"coupling\.lss_window: expected an integer, got None"),
    ],
)
def test_an_invalid_value_is_named(block, key, value, message):
    with pytest.raises(LayerlawsError, match=message):
        CouplingSettings.from_config({**block, key: value})
