"""What is wrong with a config file, said in a few lines before anything runs.

- Its YAML (``yaml_problems``): a key given twice in one mapping (YAML keeps the last and
  drops the first without a word), and a key that YAML 1.1 reads as a boolean (``on``,
  ``off``, ``yes``, ``no``, ``y``, ``n``), each with its line.
- Its values against the schema (``schema_problems``): one line per problem, naming the
  key, what it may be (the allowed values, the type and bounds) or, for an unknown key,
  the nearest known one; never the whole schema. A string where a number was meant that
  YAML 1.1 reads as text (``5e-3``) and a boolean where a name was meant (``on``) are
  named as such.
"""

from __future__ import annotations

import difflib
import re
import sys
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

import jsonschema
import yaml

from layerlaws.core.errors import LayerlawsError, problem_list
from layerlaws.core.settings import config_schema, type_text
from layerlaws.core.text_files import utf8_text

YAML_11_BOOLEANS = frozenset(
    word
    for base in ("y", "yes", "n", "no", "on", "off", "true", "false")
    for word in (base, base.capitalize(), base.upper())
)
"""Plain words YAML 1.1 (PyYAML, Snakemake's loader) reads as true or false."""

TEXT_NUMBER = re.compile(r"^[-+]?(\.\d+|\d+(\.\d*)?)([eE][-+]?\d+)$")
"""A number in exponent notation, which YAML 1.1 reads as text unless it has a dot and a
signed exponent (``5e-3`` and ``1e5`` are strings, ``5.0e-3`` and ``1.0e+5`` numbers)."""

MOST_PROBLEMS = 10
"""Problems listed at most; the rest are counted."""


def _scalar(node: yaml.Node) -> str | None:
    return node.value if isinstance(node, yaml.ScalarNode) else None


def _mappings(node: yaml.Node) -> Iterator[yaml.MappingNode]:
    if isinstance(node, yaml.MappingNode):
        yield node
        for key, value in node.value:
            yield from _mappings(key)
            yield from _mappings(value)
    elif isinstance(node, yaml.SequenceNode):
        for item in node.value:
            yield from _mappings(item)


def _mark(mark: yaml.Mark | None) -> str:
    return f"line {mark.line + 1}, column {mark.column + 1}" if mark else ""


def _parser_error(error: yaml.YAMLError) -> str:
    """The parser's complaint with its lines: ``while parsing a flow sequence (line 7,
    column 26): expected ',' or ']', but got '<stream end>' (line 8, column 1)``."""
    context, problem = getattr(error, "context", None), getattr(error, "problem", None)
    if problem is None:
        return str(error)
    opened = f"{context} ({_mark(error.context_mark)}): " if error.context_mark else ""
    return f"{opened}{problem} ({_mark(error.problem_mark)})"


def yaml_problems(text: str, name: str) -> list[str]:
    """The problems of the YAML ``text`` of the file ``name``: keys given twice and keys
    read as booleans, each with its line (1-based), or the parser's error with its line
    and column."""
    try:
        root = yaml.compose(text, Loader=yaml.SafeLoader)
    except yaml.YAMLError as error:
        return [f"{name}: not valid YAML: {_parser_error(error)}"]
    found = []
    for mapping in _mappings(root) if root is not None else ():
        lines: dict[str, int] = {}
        for key, _ in mapping.value:
            word, line = _scalar(key), key.start_mark.line + 1
            if word is None:
                continue
            if key.style is None and word in YAML_11_BOOLEANS:
                found.append(
                    f"{name}, line {line}: the key {word} is read by YAML as "
                    f"{word.lower() in ('y', 'yes', 'on', 'true')}; quote it ('{word}') "
                    "to use it as a name"
                )
            if word in lines:
                found.append(
                    f"{name}, line {line}: the key {word!r} is given twice in one block "
                    f"(also on line {lines[word]}); YAML would keep only the last: "
                    "remove or rename one"
                )
            lines.setdefault(word, line)
    return found


def file_problems(path: str | Path) -> list[str]:
    """``yaml_problems`` of the config file at ``path``, or why it cannot be read."""
    try:
        text = utf8_text(Path(path), "config file")
    except OSError as error:
        return [f"{path}: cannot be read ({error.strerror or error})"]
    except LayerlawsError as error:
        return [str(error)]
    return yaml_problems(text, str(path))


def problems_message(problems: list[str]) -> str:
    """The message of a config with ``problems``: a line each, and where keys are described."""
    return (
        f"{problem_list('The config is not valid', problems)}\n"
        "Every key is described in docs/configuration.md."
    )


def _where(error: jsonschema.ValidationError) -> str:
    path = "".join(
        f"[{part}]" if isinstance(part, int) else f".{part}" for part in error.absolute_path
    )
    return path.lstrip(".") or "the config"


def _unknown_keys(error: jsonschema.ValidationError) -> list[str]:
    known = sorted(error.schema.get("properties", {}))
    lines = []
    for key in sorted(set(error.instance) - set(known), key=str):
        nearest = difflib.get_close_matches(str(key), known, n=1, cutoff=0.6)
        hint = f"did you mean {nearest[0]!r}?" if nearest else f"known keys: {', '.join(known)}"
        where = _where(error)
        lines.append(f"{where + '.' if where != 'the config' else ''}{key}: unknown key; {hint}")
    return lines


def _yaml_hint(value: Any) -> str:
    if isinstance(value, str) and TEXT_NUMBER.match(value):
        mantissa, exponent = re.split("[eE]", value)
        mantissa = mantissa if "." in mantissa else mantissa + ".0"
        exponent = exponent if exponent[0] in "+-" else "+" + exponent
        return f" (YAML 1.1 reads {value} as text, not a number: write {mantissa}e{exponent})"
    if isinstance(value, bool):
        return " (YAML reads on, off, yes and no as booleans: quote a name, as in 'on')"
    return ""


def _describe(error: jsonschema.ValidationError) -> list[str]:
    if error.validator == "additionalProperties" and isinstance(error.instance, Mapping):
        return _unknown_keys(error)
    if error.validator in ("oneOf", "anyOf", "type", "enum", "const"):
        return [
            f"{_where(error)}: {error.instance!r} is not allowed: expected "
            f"{type_text(error.schema).replace('`', '')}{_yaml_hint(error.instance)}"
        ]
    return [f"{_where(error)}: {error.message}{_yaml_hint(error.instance)}"]


def schema_problems(config: Mapping[str, Any]) -> list[str]:
    """One line per way ``config`` breaks the schema, at most ``MOST_PROBLEMS`` and a count
    of the rest, in the order of the keys."""
    validator = jsonschema.Draft202012Validator(config_schema())
    errors = sorted(validator.iter_errors(config), key=lambda error: str(error.absolute_path))
    lines = [line for error in errors for line in _describe(error)]
    if len(lines) > MOST_PROBLEMS:
        rest = len(lines) - MOST_PROBLEMS
        lines = [*lines[:MOST_PROBLEMS], f"… and {rest} more"]
    return lines


def main(arguments: list[str]) -> int:
    """``python -m layerlaws.core.config_errors FILE…``: the problems of config files (their
    YAML, then the schema), a line each, and status 1 if there is any. It reads a file that
    Snakemake cannot (a missing file, YAML that does not parse) and says where."""
    problems = []
    for path in arguments:
        found = file_problems(path)
        problems += found or schema_problems(yaml.safe_load(Path(path).read_text()) or {})
    print(problems_message(problems) if problems else f"no problems in {', '.join(arguments)}")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
