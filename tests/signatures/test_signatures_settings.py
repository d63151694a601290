"""SignatureSettings from the validated config block and from the comparing rule's
params: typed values, and errors that name a missing or invalid key."""

from dataclasses import fields

import pytest
from config_blocks import rule_params, validated_block

from layerlaws.core.errors import LayerlawsError
from layerlaws.signatures.settings import SignatureSettings


@pytest.fixture
def block():
    return validated_block("signatures")


def test_the_default_block_and_the_rule_params_give_the_same_settings(block):
    settings = SignatureSettings.from_config(block)
    assert settings == SignatureSettings(top_tokens=2000, per_token_diagonal="include")
    params = rule_params(top_tokens=2000, per_token_diagonal="include")
    assert SignatureSettings.from_params(params) == settings
    assert SignatureSettings.from_params({"top_tokens": 5, "per_token_diagonal": "exclude"}) == (
        SignatureSettings(top_tokens=5, per_token_diagonal="exclude")
    )


@pytest.mark.parametrize("key", [setting.name for setting in fields(SignatureSettings)])
def test_a_missing_key_is_named(block, key):
    del block[key]
    with pytest.raises(LayerlawsError, match=f"^signatures.{key} is missing"):
        SignatureSettings.from_config(block)


@pytest.mark.parametrize(
    ("key", "value", "message"),
    [
        ("top_tokens", 2000.0, r"signatures\.top_tokens: expected an integer, got 2000\.0"),
        ("per_token_diagonal", "keep", r"signatures\.per_token_diagonal: expected one of"),
    ],
)
def test_an_invalid_value_is_named(block, key, value, message):
    with pytest.raises(LayerlawsError, match=message):
        SignatureSettings.from_config({**block, key: value})
