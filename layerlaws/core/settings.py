"""Typed stage settings: frozen dataclasses read once from a rule's params or a validated
config block, each field checked by the parser in its metadata (``parsed``).

A parser takes the value and its dotted key and returns the value in its field's type
(sequences become tuples, numbers floats), or raises ``ValueError`` saying what it
expected; ``read_settings`` turns that, and a missing key, into a ``LayerlawsError`` that
names the key.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import fields
from typing import Any, ClassVar, Self, TypeVar

from layerlaws.core.errors import LayerlawsError

Parser = Callable[[Any, str], Any]
PARSER = "parser"
"""The metadata key of a field's parser."""

T = TypeVar("T")


def parsed(parser: Parser) -> dict[str, Parser]:
    """The metadata of a dataclass field read by ``parser``: ``field(metadata=parsed(…))``
    (a default makes the field optional to construct by hand; ``read_settings`` still
    requires the key)."""
    return {PARSER: parser}


def as_mapping(params: Any) -> Mapping[str, Any]:
    """A rule's params (Snakemake's ``Params``, a dict or a namespace) as a mapping."""
    if isinstance(params, Mapping):
        return params
    if hasattr(params, "items"):
        return dict(params.items())
    return vars(params)


def read_settings(cls: type[T], block: Any, where: str) -> T:
    """``cls`` built from ``block`` (a mapping of config keys), every field through its
    parser; ``where`` is the block's dotted key (``coupling``), used in the errors."""
    if not isinstance(block, Mapping):
        raise LayerlawsError(f"{where} must be a mapping of settings, got {block!r}")
    values = {}
    for setting in fields(cls):  # type: ignore[arg-type]
        key = f"{where}.{setting.name}"
        if setting.name not in block:
            raise LayerlawsError(f"{key} is missing from the settings")
        try:
            values[setting.name] = setting.metadata[PARSER](block[setting.name], key)
        except (TypeError, ValueError) as error:
            raise LayerlawsError(f"{key}: {error}") from None
    return cls(**values)


class StageSettings:
    """A base of the settings dataclasses: ``from_config`` reads the block at the dotted
    key ``where``, ``from_params`` a rule's params holding that block's keys."""

    where: ClassVar[str]
    """The block's dotted key in the config (``coupling``), named in the errors."""

    @classmethod
    def from_config(cls, block: Any) -> Self:
        """From the validated config block at ``where``."""
        return read_settings(cls, block, cls.where)

    @classmethod
    def from_params(cls, params: Any) -> Self:
        """From the params of the stage's rule (params that are not settings, such as the
        model's ``dtype``, are ignored)."""
        return cls.from_config(as_mapping(params))


def integer(value: Any, key: str) -> int:
    """An int (not a bool)."""
    if isinstance(value, bool) or not isinstance(value, int):
        raise ValueError(f"expected an integer, got {value!r}")
    return value


def number(value: Any, key: str) -> float:
    """An int or a float, as a float."""
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise ValueError(f"expected a number, got {value!r}")
    return float(value)


def text(value: Any, key: str) -> str:
    """A string."""
    if not isinstance(value, str):
        raise ValueError(f"expected a string, got {value!r}")
    return value


def one_of(*allowed: str) -> Parser:
    """One of the strings ``allowed``."""

    def parse(value: Any, key: str) -> str:
        if value not in allowed:
            raise ValueError(f"expected one of {', '.join(allowed)}; got {value!r}")
        return value

    return parse


def sequence_of(item: Parser, length: int | None = None) -> Parser:
    """A list (or tuple) of items, each read by ``item``, as a tuple; of ``length`` items
    when given."""

    def parse(value: Any, key: str) -> tuple[Any, ...]:
        if not isinstance(value, list | tuple):
            raise ValueError(f"expected a list, got {value!r}")
        if length is not None and len(value) != length:
            raise ValueError(f"expected a list of {length} items, got {value!r}")
        return tuple(item(entry, key) for entry in value)

    return parse


def either(*parsers: Parser) -> Parser:
    """The value as read by the first of ``parsers`` that accepts it."""

    def parse(value: Any, key: str) -> Any:
        errors = []
        for parser in parsers:
            try:
                return parser(value, key)
            except ValueError as error:
                errors.append(str(error))
        raise ValueError("; or ".join(errors))

    return parse


def optional(parser: Parser) -> Parser:
    """None, or a value read by ``parser``."""
    return lambda value, key: None if value is None else parser(value, key)


def nested(cls: type[T]) -> Parser:
    """A sub-block read into ``cls`` (its errors name the sub-block's keys)."""
    return lambda value, key: read_settings(cls, value, key)
