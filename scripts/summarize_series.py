"""Snakemake entry point: a series' summary table and its fits
(results/series/{series}/summary.csv, fits.csv)."""

import logging
from pathlib import Path
from typing import Any

import polars as pl

from layerlaws.core.atomic import write_csv
from layerlaws.core.logs import run_logged
from layerlaws.models.metadata import MODEL_METADATA
from layerlaws.series.settings import SeriesSettings
from layerlaws.series.summary import series_fits, series_summary, subset_rows


def member_paths(member: dict[str, Any], input: Any) -> dict[str, Any]:
    """A member of the ``members`` param with its input names replaced by their files."""

    def path(name: str | None) -> str | None:
        return None if name is None else getattr(input, name)

    return {
        **member,
        "facts": str(Path(path(member["facts"])) / MODEL_METADATA),
        "law": {dataset: path(name) for dataset, name in member["law"].items()},
        "evaluation": {dataset: path(name) for dataset, name in member["evaluation"].items()},
        "geometry": {dataset: path(name) for dataset, name in member.get("geometry", {}).items()},
        **{kind: path(member[kind]) for kind in ("depth", "trajectories", "rcos")},
    }


def main() -> None:
    params = snakemake.params
    members = [member_paths(member, snakemake.input) for member in params.members]
    settings = SeriesSettings.from_params(params)
    summary = series_summary(members, settings.x, params.norm, settings.exclude_from_fits)
    fits = series_fits(summary, settings.fit_subsets)
    write_csv(snakemake.output.summary, summary)
    write_csv(snakemake.output.fits, fits)
    log = logging.getLogger("layerlaws")
    log.info("%d models, %d rows, %d fits", summary["model"].n_unique(), len(summary), len(fits))
    for name, bounds in settings.fit_subsets.items():
        rows = subset_rows(summary, bounds, name).filter(pl.col("in_fits"))
        models = rows["model"].unique(maintain_order=True).to_list()
        log.info(
            "subset %s: %d models in the fits (%s), %d fits (a fit needs three models)",
            name,
            len(models),
            ", ".join(models),
            fits.filter(pl.col("subset") == name).height,
        )


run_logged(main, snakemake.log[0], snakemake.resources)
