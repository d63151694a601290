"""Stage settings whose one source is the config schema: every settings dataclass reads
its keys' defaults, bounds and allowed values from the schema, converts them to its
types, names the dotted key of an invalid value, and cannot declare a key the schema
lacks; a rule's ``settings`` param reads back as the same settings."""

from __future__ import annotations

import importlib
import pkgutil
from dataclasses import fields

import pytest
from config_blocks import rule_params, validated_block

import layerlaws
from layerlaws.core.errors import LayerlawsError
from layerlaws.core.settings import StageSettings, allowed, schema_at, settings_of


def settings_classes() -> list[type[StageSettings]]:
    """Every settings dataclass of the library (each package's ``settings`` module)."""
    found = {}
    for package in pkgutil.iter_modules(layerlaws.__path__):
        try:
            module = importlib.import_module(f"layerlaws.{package.name}.settings")
        except ModuleNotFoundError:
            continue
        for value in vars(module).values():
            if isinstance(value, type) and "where" in vars(value):
                found[value.__qualname__] = value
    return sorted(found.values(), key=lambda cls: cls.__qualname__)


CLASSES = settings_classes()


def config_block(cls: type[StageSettings]) -> dict:
    """The validated default config's block that ``cls`` reads (the first series' for
    ``series.*``)."""
    where = cls.where.split(".")
    block = validated_block(where[0])
    for part in where[1:]:
        block = next(iter(block.values())) if part == "*" else block[part]
    return block


def test_every_stage_has_its_settings():
    names = {cls.__qualname__ for cls in CLASSES}
    assert {"EquilearningSettings", "CouplingSettings", "SignatureSettings"} <= names
    assert {"SeriesSettings", "SyntheticTrainingSettings", "MaskingSettings"} <= names


@pytest.mark.parametrize("cls", CLASSES, ids=lambda cls: cls.__qualname__)
def test_a_setting_left_out_takes_the_schemas_default(cls):
    required = [s.name for s in fields(cls) if "default" not in schema_at(f"{cls.where}.{s.name}")]
    given = {name: config_block(cls)[name] for name in required}
    read = cls.from_config(given)
    for setting in fields(cls):
        if setting.name in required:
            continue
        default = schema_at(f"{cls.where}.{setting.name}")["default"]
        assert read == cls.from_config({**given, setting.name: default})
    if not required:
        assert read == cls()


@pytest.mark.parametrize("cls", CLASSES, ids=lambda cls: cls.__qualname__)
def test_the_rule_param_reads_back_as_the_same_settings(cls):
    block = config_block(cls)
    param = cls.params(block)
    assert list(param) == [setting.name for setting in fields(cls)]
    assert cls.from_params(rule_params(settings=param)) == cls.from_config(block)
    assert cls.from_params({"settings": param}) == cls.from_config(block)


def test_values_arrive_in_their_fields_types():
    from layerlaws.coupling.settings import CouplingSettings
    from layerlaws.equilearning.settings import EquilearningSettings, MaskingSettings
    from layerlaws.signatures.settings import SignatureSettings
    from layerlaws.synthetic.settings import SyntheticTrainingSettings

    settings = EquilearningSettings.from_config({"offsets": [1, 2], "cutoff": 1e-10})
    assert settings.offsets == (1, 2) and settings.norms == ("model",)
    assert settings.token_views.groups == (("they", "them"), ("have", "had"), ("are", "is"))
    masking = MaskingSettings.from_config({"rate": 1})
    assert isinstance(masking.rate, float) and masking.rate == 1.0 and masking.seed == 0
    assert CouplingSettings.from_config({"token_layers": [3, [1, 4]]}).token_layers == (3, (1, 4))
    records = SyntheticTrainingSettings.from_config({"records": [0, 5], "learning_rate": 1})
    assert records.records == (0, 5) and isinstance(records.learning_rate, float)
    assert SyntheticTrainingSettings.from_config({"records": 8}).records == 8
    top = SignatureSettings.from_config({"top_tokens": 2000.0}).top_tokens
    assert top == 2000 and isinstance(top, int)


@pytest.mark.parametrize(
    ("where", "block", "message"),
    [
        ("equilearning", {"offsets": 1}, r"^equilearning\.offsets: 1 is not of type 'array'"),
        ("equilearning", {"offsets": [1, "2"]}, r"^equilearning\.offsets\[1\]: '2' is not of"),
        ("equilearning", {"offsets": [9]}, r"^equilearning\.offsets\[0\]: 9 is greater than"),
        ("equilearning", {"norms": ["layer"]}, r"^equilearning\.norms\[0\]: 'layer' is not one"),
        ("equilearning", {"shuffle_seed": True}, r"^equilearning\.shuffle_seed: True is not of"),
        ("equilearning", {"cutoff": 0.1}, r"^equilearning\.cutoff: 0\.1 is greater than"),
        ("equilearning", {"fuzziness": []}, r"^equilearning\.fuzziness: \[\] is not of type"),
        ("equilearning", {"masking": {"scheme": "random"}}, r"^equilearning\.masking\.scheme: "),
        ("equilearning", {"token_views": {"norm": "pca"}}, r"token_views\.norm: 'pca' is not"),
        ("coupling", {"ks": [10, 2.5]}, r"^coupling\.ks\[1\]: 2\.5 is not of type 'integer'"),
        ("coupling", {"token_layers": [[1, 2, 3]]}, r"^coupling\.token_layers\[0\]: "),
        ("coupling", {"metrics": ["paper", "trace"]}, r"^coupling\.metrics\[1\]: 'trace' is not"),
        ("coupling", {"lss_window": None}, r"^coupling\.lss_window: None is not of type"),
        ("signatures", {"top_tokens": 2000.5}, r"^signatures\.top_tokens: 2000\.5 is not of"),
        ("synthetic", {"anchors": [11]}, r"^synthetic\.anchors: \[11\] is too short"),
        ("synthetic", {"learning_rate": "1e-3"}, r"^synthetic\.learning_rate: '1e-3' is not of"),
        ("synthetic", {"shown_labels": {"add": "x"}}, r"^synthetic\.shown_labels\.add: 'x'"),
    ],
)
def test_an_invalid_value_is_named_by_its_dotted_key(where, block, message):
    tried = [
        cls for cls in CLASSES if cls.where == where and set(block) & {f.name for f in fields(cls)}
    ]
    assert tried, where
    for cls in tried:
        with pytest.raises(LayerlawsError, match=message):
            cls.from_config(block)


def test_a_block_that_is_no_mapping_and_a_required_key_are_named():
    from layerlaws.series.settings import SeriesSettings

    with pytest.raises(LayerlawsError, match=r"^series\.\*: missing x"):
        SeriesSettings.from_config({"exclude_from_fits": []})
    with pytest.raises(LayerlawsError, match=r"^series\.\* must be a mapping of settings"):
        SeriesSettings.from_params({"settings": ["x"]})


def test_a_field_the_schema_lacks_fails_when_the_class_is_made():
    with pytest.raises(LayerlawsError, match=r"coupling\.kz is not a key of the config schema"):

        @settings_of("coupling")
        class Misspelt(StageSettings):
            kz: tuple[int, ...]


def test_the_allowed_values_are_the_schemas():
    assert allowed("equilearning.norms") == ("model", "standardize", "none")
    assert allowed("coupling.svd") == ("auto", "full", "randomized", "matrix_free")
    assert allowed("series.*.x") == ("step", "tokens", "parameters", "label")


def test_the_execution_block_is_read_like_the_stages():
    from layerlaws.pipeline.execution import Execution

    assert Execution.from_config({"execution": validated_block("execution")}) == Execution()
    assert Execution().partition_runtime_limits == {} and Execution().checkpoint_minutes == 10.0
    assert Execution.from_config({"execution": {"batch_size": 8}}).batch_size == 8
    with pytest.raises(LayerlawsError, match=r"^execution\.device: 'gpu' is not one of"):
        Execution.from_config({"execution": {"device": "gpu"}})
