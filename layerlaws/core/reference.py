"""The configuration reference (``docs/configuration.md``), generated from the config schema:
every key with its type, bounds, allowed values, default and description, so that the
reference cannot drift from what Snakemake validates. ``python -m layerlaws.core.reference
docs/configuration.md`` rewrites it; a test checks that it is current."""

from __future__ import annotations

import sys
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

from layerlaws.core.atomic import atomic_path
from layerlaws.core.settings import config_schema, type_text, value_text

HEADER = """# Configuration reference

Generated from the config schema (`layerlaws/config.schema.yaml`) by
`python -m layerlaws.core.reference docs/configuration.md`; edit the schema, not this page.
Every key is optional unless marked *required*; a missing key takes its default when
Snakemake validates the config. `<key>` stands for a name you choose (a model, dataset,
training, series or prompt set key: letters, digits, `_`, `.`, `-`).
"""


def key_entry(path: str, schema: Mapping[str, Any], required: bool) -> str:
    """The line of one key: its path, type, default and description (also the docstring of
    its settings field in the docs site's API reference)."""
    parts = [f"`{path}`", type_text(schema)]
    if required:
        parts.append("*required*")
    if "default" in schema and not isinstance(schema["default"], dict):
        parts.append(f"default {value_text(schema['default'])}")
    text = " · ".join(parts)
    description = schema.get("description")
    return f"{text}. {description[0].upper()}{description[1:]}" if description else text


def entries(path: str, schema: Mapping[str, Any], depth: int) -> Iterator[str]:
    """The bullet lines of the keys under ``schema`` (at ``path``), nested by depth."""
    if "$ref" in schema and not schema["$ref"].endswith("/key"):
        schema = config_schema()["$defs"][schema["$ref"].rsplit("/", 1)[-1]]
    extra = schema.get("additionalProperties")
    if isinstance(extra, Mapping) and "properties" in extra:
        yield from entries(f"{path}.<key>", extra, depth)
        return
    required = set(schema.get("required", ()))
    for name, sub in schema.get("properties", {}).items():
        if sub == {}:
            continue  # a variant's repeat of its discriminating key
        yield "  " * depth + "- " + key_entry(f"{path}.{name}", sub, name in required)
        yield from entries(f"{path}.{name}", sub, depth + 1)
    for variant in schema.get("allOf", ()):
        condition = variant["if"]["properties"]
        ((key, value),) = ((k, v["const"]) for k, v in condition.items())
        yield "  " * depth + f"- when `{path}.{key}` is `{value}`:"
        yield from entries(path, variant["then"], depth + 1)


def render() -> str:
    """The whole reference, one section per top-level block."""
    sections = [HEADER]
    for name, schema in config_schema()["properties"].items():
        lines = [f"## `{name}`", ""]
        if "description" in schema:
            lines += [schema["description"][0].upper() + schema["description"][1:] + ".", ""]
        lines.append(f"`{name}`: {type_text(schema)}.")
        body = list(entries(name, schema, 0))
        if not body and "items" in schema:
            body = list(entries(f"{name}[]", schema["items"], 0))
        sections.append("\n".join([*lines, "", *body]) if body else "\n".join(lines))
    return "\n\n".join(sections).rstrip() + "\n"


def main(arguments: list[str]) -> None:
    """Write the reference to the path given (``docs/configuration.md``)."""
    if len(arguments) != 1:
        raise SystemExit("usage: python -m layerlaws.core.reference docs/configuration.md")
    with atomic_path(Path(arguments[0])) as path:
        path.write_text(render())


if __name__ == "__main__":
    main(sys.argv[1:])
