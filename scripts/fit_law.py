"""Snakemake entry point: fit the law of equi-learning to the prediction residuals and to
the separation fuzziness (results/equilearning/…/law.csv, fuzziness_law.csv)."""

import polars as pl

from layerlaws.core.atomic import write_csv
from layerlaws.core.logs import run_logged
from layerlaws.equilearning.law import fuzziness_law_table, law_table


def main() -> None:
    write_csv(snakemake.output.law, law_table(pl.read_csv(snakemake.input.pr)))
    fuzziness = pl.read_csv(snakemake.input.fuzziness)
    write_csv(snakemake.output.fuzziness, fuzziness_law_table(fuzziness))


run_logged(main, snakemake.log[0], snakemake.resources)
