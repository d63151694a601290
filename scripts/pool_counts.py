"""Snakemake entry point: counts of a pool of corpora, summed in DuckDB."""

import tempfile

from layerlaws.core.logs import run_logged
from layerlaws.signatures.counting import connect, pool_counts


def main() -> None:
    with tempfile.TemporaryDirectory(dir=snakemake.resources.tmpdir, prefix="duckdb-") as spill:
        connection = connect(snakemake.resources.mem_mb, spill, snakemake.threads)
        for kind in ("unigrams", "bigrams"):
            pool_counts(connection, kind, snakemake.input[kind], snakemake.output[kind])


run_logged(main, snakemake.log[0], snakemake.resources)
