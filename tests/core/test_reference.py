"""The configuration reference is generated from the schema and current; the schema
describes every key and uses only JSON Schema's keywords (a YAML slip such as
``description: branch, tag or commit`` in a flow mapping makes a stray key)."""

from __future__ import annotations

from pathlib import Path

import pytest

from layerlaws.core.reference import main, render, type_text
from layerlaws.core.settings import config_schema

ROOT = Path(__file__).parents[2]
REFERENCE = ROOT / "docs" / "configuration.md"
KEYWORDS = {
    "$schema", "$defs", "$ref", "description", "type", "additionalProperties", "properties",
    "required", "default", "enum", "const", "items", "minItems", "maxItems", "uniqueItems",
    "oneOf", "allOf", "if", "then", "minimum", "maximum", "exclusiveMinimum",
    "exclusiveMaximum", "pattern", "propertyNames", "minLength",
}  # fmt: skip


def schemas(schema, path=""):
    """Every (path, subschema) of the schema, property maps and $defs walked by name."""
    yield path, schema
    for keyword, value in schema.items():
        if keyword in ("properties", "$defs"):
            for name, sub in value.items():
                yield from schemas(sub, f"{path}.{name}")
        elif isinstance(value, dict):
            yield from schemas(value, f"{path}/{keyword}")
        elif isinstance(value, list):
            for index, item in enumerate(value):
                if isinstance(item, dict):
                    yield from schemas(item, f"{path}/{keyword}[{index}]")


def test_the_reference_is_current():
    assert REFERENCE.read_text() == render(), (
        "docs/configuration.md is stale: python -m layerlaws.core.reference docs/configuration.md"
    )


def test_the_schema_uses_only_json_schema_keywords():
    stray = [
        f"{path}: {key}"
        for path, sub in schemas(config_schema())
        for key in sub
        if key not in KEYWORDS
    ]
    assert stray == []


def test_every_key_is_described():
    undescribed = [
        f"{path}.{name}"
        for path, sub in schemas(config_schema())
        for name, child in sub.get("properties", {}).items()
        if child != {} and "description" not in child and "/if" not in path
    ]
    assert undescribed == []


@pytest.mark.parametrize(
    ("schema", "text"),
    [
        ({"type": "integer", "minimum": 1}, "integer ≥ 1"),
        ({"type": "number", "exclusiveMinimum": 0, "maximum": 1}, "number in (0, 1]"),
        ({"enum": ["a", "b"]}, 'one of `"a"`, `"b"`'),
        ({"type": ["integer", "null"], "minimum": 1}, "integer ≥ 1 or `null`"),
        (
            {"type": "array", "items": {"type": "integer"}, "minItems": 2, "maxItems": 2},
            "list of 2 of integer",
        ),
        (
            {"oneOf": [{"type": "integer", "minimum": 1}, {"const": "auto"}]},
            'integer ≥ 1 or `"auto"`',
        ),
        ({"type": "object", "additionalProperties": {"type": "number"}}, "map of name → number"),
    ],
)
def test_types_in_words(schema, text):
    assert type_text(schema) == text


def test_a_key_appears_with_its_default_and_description():
    page = render()
    assert (
        "- `coupling.ks` · list (at least 1), distinct of integer ≥ 1 · default `[10, 30, 50]`. "
        in page
    )
    assert "- when `models.<key>.source.kind` is `hub`:" in page
    assert "- `series.<key>.x` · one of " in page and "*required*" in page


def test_the_command_writes_the_page(tmp_path):
    main([str(tmp_path / "configuration.md")])
    assert (tmp_path / "configuration.md").read_text() == render()
    with pytest.raises(SystemExit, match="usage"):
        main([])
