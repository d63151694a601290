"""Snakemake entry point: the representation-geometry figure of one model × dataset (its
``observers/geometry.csv`` against the layer)."""

from pathlib import Path

import polars as pl

from layerlaws.core.logs import run_logged
from layerlaws.geometry.plots import plot_geometry


def main() -> None:
    geometry = pl.read_csv(Path(snakemake.input.observers) / "geometry.csv")
    params = snakemake.params
    plot_geometry(geometry, path=snakemake.output[0], title=params.title, options=params.plots)


run_logged(main, snakemake.log[0], snakemake.resources)
