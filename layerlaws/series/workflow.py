"""The series stage in the workflow (torch-free): its figures, its final outputs and the
check of its config block. ``layout`` and ``expanded`` are the workflow's ``Layout`` and
``ExpandedConfig`` (``layerlaws.pipeline``, which also expands the series into models and
runs)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from layerlaws.core.errors import LayerlawsError
from layerlaws.series.settings import ALL_MEMBERS

PATHS = {"series": "series/{series}"}
"""The stage's paths under the results folder (``Layout``): a series' summary, fits and
figures."""

SERIES_FIGURES = ("quantities", "generalisation", "members", "fits")
"""The figures of one series (``plot_series``)."""
TRAINING_CORPUS = "training_corpus"
"""``series.<name>.signatures``: each checkpoint's own training dataset."""


def outputs(layout: Any, expanded: Any, plot_format: str) -> list[str]:
    """Per series its summary, its fits and its figures."""
    names = ("summary.csv", "fits.csv", *(f"{n}.{plot_format}" for n in SERIES_FIGURES))
    return [
        f"{layout.series(series)}/{name}" for series in expanded.config["series"] for name in names
    ]


def check_series(config: Mapping[str, Any]) -> None:
    """Each series names known datasets, prompts and corpora, leaves out of its fits only
    its own members (a key it lists, or one revision or checkpoint ``<key>@…`` of it), and
    names no fit subset ``all`` (the fits over all members)."""
    corpora = {*config["datasets"], *config["signatures"]["pools"], TRAINING_CORPUS}
    for name, series in config["series"].items():
        listed = {entry if isinstance(entry, str) else entry["model"] for entry in series["models"]}
        for excluded in series["exclude_from_fits"]:
            if excluded.partition("@")[0] not in listed:
                raise LayerlawsError(
                    f"config series.{name}.exclude_from_fits names {excluded!r}, which is not "
                    f"a member of the series; its models: {sorted(listed)}"
                )
        if ALL_MEMBERS in series["fit_subsets"]:
            raise LayerlawsError(
                f"config series.{name}.fit_subsets names a subset {ALL_MEMBERS!r}, the name of "
                f"the fits over all members in fits.csv; give it another name"
            )
        for field, known in (
            ("datasets", config["datasets"]),
            ("prompts", config["coupling"]["prompts"]),
            ("signatures", corpora),
        ):
            values = series[field] if field == "datasets" else [series[field]]
            for value in values:
                if value is not None and value not in known:
                    raise LayerlawsError(
                        f"config series.{name}.{field} names {value!r}; known: {sorted(known)}"
                    )
