"""Snakemake entry point: law, norm-mode, fuzziness and token-view figures of one model ×
dataset."""

import polars as pl

from layerlaws.core.logs import run_logged
from layerlaws.equilearning.plots import plot_fuzziness, plot_law, plot_norms, plot_token_views


def main() -> None:
    pr = pl.read_csv(snakemake.input.pr)
    law = pl.read_csv(snakemake.input.law)
    options, title, output = snakemake.params.plots, snakemake.params.title, snakemake.output
    plot_law(pr, law, path=output.law, title=title, options=options)
    plot_norms(pr, law, path=output.norms, title=title, options=options)
    fuzziness = pl.read_csv(snakemake.input.fuzziness)
    fuzziness_law = pl.read_csv(snakemake.input.fuzziness_law)
    plot_fuzziness(
        pr,
        law,
        fuzziness,
        fuzziness_law,
        path=output.fuzziness,
        title=title,
        options=options,
    )
    views = pl.read_csv(snakemake.input.token_views)
    plot_token_views(views, path=output.token_views, title=title, options=options)


run_logged(main, snakemake.log[0], snakemake.resources)
