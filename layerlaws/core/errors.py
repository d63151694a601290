"""The one exception type the pipeline raises for problems a user can fix, and the check
every stage makes of a config key that names another (``require_key``)."""

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
