"""A series' summary settings (the config's ``series.<name>`` block), read once from the
summarising rule's params."""

from __future__ import annotations

from dataclasses import dataclass, field

from layerlaws.core.settings import StageSettings, one_of, parsed, sequence_of, text

X_KINDS = ("step", "tokens", "parameters", "label")
"""What a series' x can mean."""


@dataclass(frozen=True)
class SeriesSettings(StageSettings):
    """How a series is summarised; the config block's ``models``, ``datasets``,
    ``prompts`` and ``signatures`` are the plan's."""

    where = "series"

    x: str = field(metadata=parsed(one_of(*X_KINDS)))
    """What x means: a checkpoint's step, tokens seen, parameters, or the models' labels."""
    exclude_from_fits: tuple[str, ...] = field(default=(), metadata=parsed(sequence_of(text)))
    """Model keys measured but left out of the fits (a key with revisions or a training
    stands for all its members), e.g. models whose external score is doubtful."""
