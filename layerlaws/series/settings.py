"""A series' summary settings (the config's ``series.<name>`` block), read once from the
summarising rule's params."""

from __future__ import annotations

from layerlaws.core.settings import StageSettings, allowed, settings_of

X_KINDS = allowed("series.*.x")
"""What a series' x can mean."""
ALL_MEMBERS = "all"
"""The ``subset`` of a series' fits over all its members with ``in_fits``, a name no
``fit_subsets`` entry may take."""


@settings_of("series.*")
class SeriesSettings(StageSettings):
    """How a series is summarised; the config block's ``models``, ``datasets``,
    ``prompts`` and ``signatures`` are the plan's."""

    x: str
    exclude_from_fits: tuple[str, ...]
    fit_subsets: dict[str, dict[str, list[float | None]]]
