"""CouplingSettings from the validated config block and from the measuring rule's params:
typed values, and errors that name a missing or invalid key."""

from dataclasses import fields, replace

import pytest
from config_blocks import rule_params, validated_block

from layerlaws.core.errors import LayerlawsError
from layerlaws.coupling.measurement import TokenCoupling
from layerlaws.coupling.settings import CouplingSettings


def validated_default_metrics():
    """The schema's default of ``coupling.metrics``."""
    import yaml
    from config_blocks import ROOT

    schema = yaml.safe_load((ROOT / "schemas" / "config.schema.yaml").read_text())
    return schema["properties"]["coupling"]["properties"]["metrics"]["default"]


@pytest.fixture
def block():
    return validated_block("coupling")


def test_the_default_block_arrives_with_its_types_and_equals_the_defaults(block):
    settings = CouplingSettings.from_config(block)
    # config.yaml measures every metric; the schema's default, like the dataclass's, is
    # the paper's two: m̃ (Eq. 14) and m (Eq. 13).
    every = ("paper", "unnormalised", "released_trace", "released_norm")
    every += ("released_trace_swapped", "released_norm_swapped")
    assert settings == replace(CouplingSettings(), metrics=every)
    assert CouplingSettings().metrics == ("paper", "unnormalised") and settings.svd_seed == 0
    without_metrics = {key: value for key, value in block.items() if key != "metrics"}
    assert CouplingSettings.from_config(
        {**without_metrics, "metrics": validated_default_metrics()}
    ).metrics == ("paper", "unnormalised")
    assert settings.ks == (10, 30, 50) and settings.token_layers == ()
    assert settings.final_norm == "in_last_block" and settings.includes_final_norm
    assert not CouplingSettings(final_norm="excluded").includes_final_norm
    assert CouplingSettings.from_config({**block, "metrics": every[:2]}).metrics == every[:2]


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
        ("svd", "lanczos", r"coupling\.svd: expected one of auto, full, randomized"),
        (
            "metrics",
            ["paper", "trace"],
            r"coupling\.metrics: expected one of paper, unnormalised, released_trace, "
            r"released_norm, released_trace_swapped, released_norm_swapped; got 'trace'",
        ),
        ("metrics", "paper", r"coupling\.metrics: expected a list, got 'paper'"),
        ("svd_seed", 1.5, r"coupling\.svd_seed: expected an integer, got 1\.5"),
        ("fixed_output_token", "-1", r"coupling\.fixed_output_token: expected an integer"),
        ("lss_window", None, r"coupling\.lss_window: expected an integer, got None"),
    ],
)
def test_an_invalid_value_is_named(block, key, value, message):
    with pytest.raises(LayerlawsError, match=message):
        CouplingSettings.from_config({**block, key: value})
