"""The one exception type the pipeline raises for problems a user can fix, the check every
stage makes of a config key that names another (``require_key``), and how several
problems found at once are listed (``problem_list``)."""

from __future__ import annotations

from collections.abc import Collection
from typing import Any


class LayerlawsError(Exception):
    """A problem with the user's input or environment; the message says what to do."""


def require_key(where: str, value: Any, table: str, known: Collection[str]) -> None:
    """Raise unless ``value`` (the config's value at the dotted key ``where``) is one of
    ``known``, the keys of the config's ``table``."""
    if value not in known:
        raise LayerlawsError(
            f"config {where} is {value!r}, which is not a key of {table}; known {table}: "
            f"{sorted(known)}"
        )


def problem_list(title: str, problems: list[str]) -> str:
    """``title`` with the count of ``problems``, then a line per problem."""
    listed = "\n".join(f"  - {problem}" for problem in problems)
    return f"{title} ({len(problems)} problem{'s' * (len(problems) > 1)}):\n{listed}"
