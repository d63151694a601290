"""Snakemake entry point: one model's signatures across the corpora they were compared on
(Yao & Xu Fig. 5B and 5C): R_cos per corpus as a table and a figure, and the per-token
view with every corpus's tokens pooled."""

import polars as pl

from layerlaws.core.atomic import write_csv
from layerlaws.core.logs import run_logged
from layerlaws.signatures.comparison import by_corpus
from layerlaws.signatures.plots import plot_per_token_by_corpus, plot_rcos_by_corpus


def main() -> None:
    params, output = snakemake.params, snakemake.output
    rcos = by_corpus([pl.read_csv(path) for path in snakemake.input.rcos], params.corpora)
    per_token = by_corpus(
        [pl.read_parquet(path) for path in snakemake.input.per_token], params.corpora
    )
    write_csv(output.rcos, rcos)
    plot_rcos_by_corpus(rcos, path=output.rcos_figure, title=params.title, options=params.plots)
    plot_per_token_by_corpus(
        per_token, path=output.per_token_figure, title=params.title, options=params.plots
    )


run_logged(main, snakemake.log[0], snakemake.resources)
