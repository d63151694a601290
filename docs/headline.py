"""The README's headline figure from a default run: the next token's log PR against relative
depth for SmolLM2-135M, the small Llama trained here (its last checkpoint) and the same
Llama at step 0, its random initialisation, on the science summaries.

    python docs/headline.py results docs/headline-law.png
"""

from __future__ import annotations

import sys
from pathlib import Path

import polars as pl

from layerlaws.equilearning.plots import plot_summary

RUNS = (("smollm2-135m", "wiki-science"), ("wiki-llama@step800", "wiki-science"))
RANDOM_TWIN = ("wiki-llama@step0", "wiki-science")


def main(results: Path, figure: Path) -> None:
    folder = results / "equilearning"
    tables = {run: pl.read_csv(folder / run[0] / run[1] / "pr.csv") for run in (*RUNS, RANDOM_TWIN)}
    summary = pl.read_csv(folder / "summary.csv")
    options = {"format": figure.suffix.lstrip("."), "dpi": 150, "width": 12.0}
    plot_summary(tables, summary, path=figure, options=options)


if __name__ == "__main__":
    main(Path(sys.argv[1]), Path(sys.argv[2]))
