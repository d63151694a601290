"""Snakemake entry point: sample probing texts (results/corpus/{dataset}/sentences.parquet)."""

from layerlaws.core.atomic import write_parquet
from layerlaws.core.logs import run_logged
from layerlaws.text.corpus import excluded_sources, sample_sentences


def main() -> None:
    sentences = sample_sentences(
        snakemake.params.source,
        snakemake.params.n_samples,
        snakemake.params.sample_seed,
        excluded_sources(snakemake.input.exclude),
    )
    write_parquet(snakemake.output[0], sentences)


run_logged(main, snakemake.log[0], snakemake.resources)
