"""Snakemake entry point: unigram and bigram counts in DuckDB (results/signatures/…)."""

import tempfile
from pathlib import Path

from layerlaws.core.logs import run_logged
from layerlaws.signatures.counting import connect, count_tokens


def main() -> None:
    with tempfile.TemporaryDirectory(dir=snakemake.resources.tmpdir, prefix="duckdb-") as spill:
        connection = connect(snakemake.resources.mem_mb, spill, snakemake.threads)
        count_tokens(
            connection,
            sorted(Path(snakemake.input.shards).glob("shard_*.parquet")),
            snakemake.output.unigrams,
            snakemake.output.bigrams,
        )


run_logged(main, snakemake.log[0], snakemake.resources)
