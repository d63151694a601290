"""Typed stage settings whose one source is the config schema (``layerlaws/config.schema.yaml``).

Every setting is written once, in the schema: its type, bounds, allowed values, default and
description. Snakemake validates the config with the schema and fills in its defaults; the
configuration reference (``docs/configuration.md``) is generated from it; and a stage's
settings dataclass names only the keys it reads and their Python types. ``settings_of``
gives such a dataclass its defaults from the schema (so the Python API builds it by hand
with the schema's defaults) and refuses, at import, a field that is not a key of the
schema's block. ``read_settings`` checks each value against its key's schema (the error
names the dotted key) and converts it to the field's type: lists become tuples, ints
become floats where the field is a float, sub-blocks become their dataclasses.
"""

from __future__ import annotations

import copy
import functools
import inspect
import json
import types
import typing
from collections.abc import Callable, Mapping
from dataclasses import MISSING, dataclass, field, fields, is_dataclass
from pathlib import Path
from typing import Any, ClassVar, Self, TypeVar

import jsonschema
import yaml

from layerlaws.core.errors import LayerlawsError

SCHEMA_FILE = Path(__file__).parents[1] / "config.schema.yaml"
"""The config schema: the one source of every setting."""

T = TypeVar("T")


@functools.cache
def config_schema() -> dict[str, Any]:
    """The config schema, parsed (read once)."""
    return yaml.safe_load(SCHEMA_FILE.read_text())


def with_defaults(config: Mapping[str, Any]) -> dict[str, Any]:
    """A copy of a valid ``config`` with the schema's defaults filled in, as the
    workflow's validation fills them (every ``properties`` default, at every level)."""
    filled = copy.deepcopy(dict(config))
    check_properties = jsonschema.Draft202012Validator.VALIDATORS["properties"]

    def fill(validator: Any, properties: Any, instance: Any, schema: Any) -> Any:
        if isinstance(instance, dict):
            for name, property_schema in properties.items():
                if "default" in property_schema:
                    instance.setdefault(name, copy.deepcopy(property_schema["default"]))
        yield from check_properties(validator, properties, instance, schema)

    filling = jsonschema.validators.extend(jsonschema.Draft202012Validator, {"properties": fill})
    filling(config_schema()).validate(filled)
    return filled


def schema_at(key: str) -> dict[str, Any]:
    """The schema of the dotted config key ``key`` (``equilearning.masking.rate``; ``*``
    stands for any key of a map, ``series.*.x``)."""
    schema = config_schema()
    for part in key.split("."):
        if part == "*":  # any key of a map (series.*.x)
            schema = schema["additionalProperties"]
            continue
        properties = schema.get("properties", {})
        if part not in properties:
            raise LayerlawsError(f"{key} is not a key of the config schema ({SCHEMA_FILE})")
        schema = properties[part]
    return schema


def allowed(key: str) -> tuple[Any, ...]:
    """The values the schema allows at ``key``: its ``enum``, or its items' for a list."""
    schema = schema_at(key)
    return tuple(schema.get("items", schema)["enum"])


def value_text(value: Any) -> str:
    """A default or allowed value as written in YAML's flow style."""
    return f"`{json.dumps(value, ensure_ascii=False)}`"


def _bounds(schema: Mapping[str, Any]) -> str:
    """`` ≥ 1``, `` in (0, 1]``… for a number's bounds."""
    low = ("≥", schema["minimum"]) if "minimum" in schema else None
    low = (">", schema["exclusiveMinimum"]) if "exclusiveMinimum" in schema else low
    high = ("≤", schema["maximum"]) if "maximum" in schema else None
    high = ("<", schema["exclusiveMaximum"]) if "exclusiveMaximum" in schema else high
    if low and high:
        opening, closing = "[" if low[0] == "≥" else "(", "]" if high[0] == "≤" else ")"
        return f" in {opening}{low[1]}, {high[1]}{closing}"
    bound = low or high
    return f" {bound[0]} {bound[1]}" if bound else ""


def type_text(schema: Mapping[str, Any]) -> str:
    """What a value of ``schema`` may be, in words."""
    if "$ref" in schema:
        name = schema["$ref"].rsplit("/", 1)[-1]
        return type_text(config_schema()["$defs"][name]) if name != "key" else "a key"
    if "enum" in schema:
        return "one of " + ", ".join(value_text(value) for value in schema["enum"])
    if "const" in schema:
        return value_text(schema["const"])
    if "oneOf" in schema:
        return " or ".join(type_text(choice) for choice in schema["oneOf"])
    kinds = schema.get("type")
    if isinstance(kinds, list):
        return " or ".join(type_text({**schema, "type": kind}) for kind in kinds)
    if kinds == "null":
        return "`null`"
    if kinds == "array":
        size = ""
        if schema.get("minItems") is not None and schema.get("minItems") == schema.get("maxItems"):
            size = f" of {schema['minItems']}"
        elif schema.get("minItems"):
            size = f" (at least {schema['minItems']})"
        unique = ", distinct" if schema.get("uniqueItems") else ""
        return f"list{size}{unique} of " + type_text(schema.get("items", {}))
    if kinds == "object" or "properties" in schema or "allOf" in schema:
        extra = schema.get("additionalProperties")
        if isinstance(extra, Mapping) and "properties" not in extra:
            return "map of name → " + type_text(extra)
        return "block"
    if kinds in ("integer", "number"):
        return ("integer" if kinds == "integer" else "number") + _bounds(schema)
    return {"string": "string", "boolean": "true or false"}.get(kinds, "any")


def _typed(value: Any, hint: Any, key: str) -> Any:
    """``value`` (valid under its key's schema) in the Python type ``hint``."""
    if is_dataclass(hint):
        return read_settings(hint, value, key)
    if isinstance(value, list | tuple):
        arguments = [a for a in typing.get_args(hint) if a is not Ellipsis]
        return tuple(_typed(item, _item_hint(arguments), key) for item in value)
    if isinstance(value, int) and not isinstance(value, bool) and _allows(hint, float):
        return float(value)
    if isinstance(value, float) and _allows(hint, int) and not _allows(hint, float):
        return int(value)  # JSON Schema's integers include 2000.0
    return value


def _item_hint(arguments: list[Any]) -> Any:
    """The hint of a tuple's items: ``tuple[X, ...]``'s X, or Any."""
    return arguments[0] if len(arguments) == 1 else Any


def _allows(hint: Any, kind: type) -> bool:
    """Whether ``hint`` is ``kind`` or a union holding it."""
    if isinstance(hint, types.UnionType) or typing.get_origin(hint) is typing.Union:
        return kind in typing.get_args(hint)
    return hint is kind


def _validator(schema: Mapping[str, Any]) -> jsonschema.Draft202012Validator:
    """A validator of ``schema`` that resolves the config schema's ``#/$defs/…``."""
    return jsonschema.Draft202012Validator({**schema, "$defs": config_schema()["$defs"]})


def check_value(value: Any, key: str) -> None:
    """Raise a ``LayerlawsError`` naming ``key`` unless ``value`` is valid under its schema."""
    error = jsonschema.exceptions.best_match(_validator(schema_at(key)).iter_errors(value))
    if error is not None:
        where = key + "".join(
            f"[{part}]" if isinstance(part, int) else f".{part}" for part in error.absolute_path
        )
        raise LayerlawsError(f"{where}: {error.message}")


def read_settings(cls: type[T], block: Any, where: str) -> T:
    """``cls`` built from ``block`` (a mapping of config keys at the dotted key ``where``;
    other keys are ignored, a missing one takes the schema's default), each value checked
    against its key's schema and converted to its field's type."""
    if not isinstance(block, Mapping):
        raise LayerlawsError(f"{where} must be a mapping of settings, got {block!r}")
    hints = typing.get_type_hints(cls)
    values = {}
    for setting in fields(cls):  # type: ignore[arg-type]
        if setting.name not in block:
            continue
        key = f"{where}.{setting.name}"
        check_value(block[setting.name], key)
        values[setting.name] = _typed(block[setting.name], hints[setting.name], key)
    try:
        return cls(**values)
    except TypeError:
        missing = [
            setting.name
            for setting in fields(cls)  # type: ignore[arg-type]
            if setting.name not in values
            and setting.default is MISSING
            and setting.default_factory is MISSING
        ]
        raise LayerlawsError(f"{where}: missing {', '.join(missing)}") from None


def settings_of(where: str) -> Callable[[type[T]], type[T]]:
    """A frozen, keyword-only dataclass of the settings at the dotted config key ``where``,
    each annotated field a key of that block, its default the schema's (none where the
    schema has none). A field that is not a key of the block fails here, at import."""

    def build(cls: type[T]) -> type[T]:
        hints = typing.get_type_hints(cls, localns={cls.__name__: cls})
        for name in inspect.get_annotations(cls):
            if typing.get_origin(hints[name]) is ClassVar:
                continue
            key = f"{where}.{name}"
            schema = schema_at(key)
            if "default" in schema:
                setattr(cls, name, _default_field(schema["default"], hints[name], key))
            elif is_dataclass(hints[name]):
                setattr(cls, name, field(default_factory=hints[name]))
        cls.where = where  # type: ignore[attr-defined]
        return dataclass(frozen=True, kw_only=True)(cls)

    return build


def _default_field(default: Any, hint: Any, key: str) -> Any:
    """The dataclass field of a schema default (a factory for a sub-block)."""
    if is_dataclass(hint):
        return field(default_factory=lambda: read_settings(hint, default, key))
    if isinstance(default, dict):
        return field(default_factory=lambda: copy.deepcopy(default))
    return field(default=_typed(default, hint, key))


class StageSettings:
    """A base of the settings dataclasses made by ``settings_of``: ``from_config`` reads the
    config block at ``where``, ``params`` gives a rule its ``settings`` param from that
    block and ``from_params`` reads it back in the rule's script."""

    where: ClassVar[str]
    """The block's dotted key in the config (``coupling``), named in the errors."""

    @classmethod
    def from_config(cls, block: Any) -> Self:
        """From the validated config block at ``where``."""
        return read_settings(cls, block, cls.where)

    @classmethod
    def params(cls, block: Mapping[str, Any], **replaced: Any) -> dict[str, Any]:
        """A rule's ``settings`` param: the keys of the validated config block at ``where``
        that these settings read (so that the rule reruns when one of them changes, and
        only then), with ``replaced`` values (a run's own ``token_views``)."""
        names = [setting.name for setting in fields(cls)]  # type: ignore[arg-type]
        return {name: copy.deepcopy(replaced.get(name, block[name])) for name in names}

    @classmethod
    def from_params(cls, params: Any) -> Self:
        """From the ``settings`` param of the stage's rule (``params``)."""
        settings = params["settings"] if isinstance(params, Mapping) else params.settings
        return cls.from_config(settings)
