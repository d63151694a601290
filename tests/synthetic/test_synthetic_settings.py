"""The synthetic stage's settings from the validated config block and from the rules'
``settings`` param: typed values, the task they define, and errors that name a missing or
invalid key."""

from dataclasses import fields

import pytest
from config_blocks import rule_params, validated_block

from layerlaws.core.errors import LayerlawsError
from layerlaws.synthetic.settings import (
    ShownLabels,
    SyntheticDataSettings,
    SyntheticPlotSettings,
    SyntheticTrainingSettings,
)

CLASSES = (SyntheticDataSettings, SyntheticTrainingSettings, SyntheticPlotSettings)


@pytest.fixture
def block():
    return validated_block("synthetic")


def test_the_default_block_arrives_with_its_types(block):
    data = SyntheticDataSettings.from_config(block)
    assert data == SyntheticDataSettings()
    assert isinstance(data.test_fraction, float) and data.anchors == (11, 20)
    training = SyntheticTrainingSettings.from_config(block)
    assert training == SyntheticTrainingSettings(learning_rate=1e-3, epochs=10, records=8)
    assert training.seeds == (0, 1, 2) and isinstance(training.learning_rate, float)
    listed = SyntheticTrainingSettings.from_config({**block, "records": [0, 5], "hidden_size": 8})
    assert listed.records == (0, 5) and listed.hidden_size == 8
    assert data.signature_inputs == "all" and training.snapshot_epoch == 120
    assert training.snapshot == 10  # the default config trains 10 epochs
    plots = SyntheticPlotSettings.from_config(block)
    assert plots.shown_labels == ShownLabels(add=150, add_same_range=120, mod=120)
    assert plots.shown_labels.of("add_same_range") == 120


def test_the_settings_define_the_task(block):
    task = SyntheticDataSettings.from_config(block).task("add")
    assert task.kind == "add" and task.anchors == tuple(range(11, 21))
    assert task.keys == tuple(range(101, 141))


@pytest.mark.parametrize("cls", CLASSES)
def test_the_rule_param_gives_the_same_settings(block, cls):
    chosen = {setting.name: block[setting.name] for setting in fields(cls)}
    assert cls.from_params(rule_params(settings=chosen)) == cls.from_config(block)


@pytest.mark.parametrize(
    ("cls", "key"), [(cls, setting.name) for cls in CLASSES for setting in fields(cls)]
)
def test_a_missing_key_is_named(block, cls, key):
    del block[key]
    with pytest.raises(LayerlawsError, match=f"^synthetic.{key} is missing"):
        cls.from_config(block)


@pytest.mark.parametrize(
    ("key", "value", "message"),
    [
        ("anchors", [11], r"synthetic\.anchors: expected a list of 2 items"),
        ("keys", "101-140", r"synthetic\.keys: expected a list"),
        ("learning_rate", "1e-3", r"synthetic\.learning_rate: expected a number"),
        ("records", 2.5, r"synthetic\.records: expected an integer, got 2\.5; or expected a"),
        ("seeds", [0, None], r"synthetic\.seeds: expected an integer, got None"),
        ("signature_inputs", "anchors", r"synthetic\.signature_inputs: expected one of all, keys"),
        ("shown_labels", {"add": 150}, r"synthetic\.shown_labels\.add_same_range is missing"),
    ],
)
def test_an_invalid_value_is_named(block, key, value, message):
    with pytest.raises(LayerlawsError, match=message):
        for cls in CLASSES:
            cls.from_config({**block, key: value})


def test_a_missing_settings_param_is_named():
    with pytest.raises(LayerlawsError, match="synthetic must be a mapping of settings"):
        SyntheticDataSettings.from_params(rule_params(tasks=["add"]))
