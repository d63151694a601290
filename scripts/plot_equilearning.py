"""Snakemake entry point: law, norm-mode, fuzziness and token-view figures of one model ×
dataset."""

import polars as pl

from layerlaws.core.logs import run_logged
from layerlaws.equilearning.plots import plot_fuzziness, plot_law, plot_norms, plot_token_views


def main() -> None:
    pr = pl.read_csv(snakemake.input.pr)
    law = pl.read_csv(snakemake.input.law)
    options = snakemake.params.plots
    plot_law(pr, law, snakemake.output.law, snakemake.params.title, options)
    plot_norms(pr, law, snakemake.output.norms, snakemake.params.title, options)
    fuzziness = pl.read_csv(snakemake.input.fuzziness)
    fuzziness_law = pl.read_csv(snakemake.input.fuzziness_law)
    plot_fuzziness(
        pr,
        law,
        fuzziness,
        fuzziness_law,
        snakemake.output.fuzziness,
        snakemake.params.title,
        options,
    )
    views = pl.read_csv(snakemake.input.token_views)
    plot_token_views(views, snakemake.output.token_views, snakemake.params.title, options)


run_logged(main, snakemake.log[0])
