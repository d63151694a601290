"""Benchmark: within-sequence bigram counting in DuckDB against collections.Counter and
polars, on a synthetic token table, and DuckDB again under a memory limit smaller than
the data.

The table has the corpus-shard schema (``sentence_id``, ``position``, ``token_id``,
``is_special``, and ``next_token_id``, which tokenisation writes and our counting
aggregates; the baselines ignore it and find successors themselves): sequences of 10–300
tokens with Zipf-distributed ids over a 50,000-token vocabulary, a BOS-like special token
opening each. The cost of writing ``next_token_id`` (part of tokenisation, not of
counting) is measured and printed too. Each method runs in a process of its own, three
times; its time is the best of the three (single runs on a shared 2-core machine vary by
about ±20 %) and its memory the largest peak resident set size of its processes
(interpreter included). All three results are checked to be the same counts.

Usage: .venv/bin/python bench/counting.py [n_rows (default 50_000_000)]
"""

from __future__ import annotations

import collections
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import polars as pl
from peak_memory import peak_rss_mib

VOCAB = 50_000
SHARDS = 8
REPEATS = 3


def synthesise(n_rows: int, folder: Path) -> tuple[int, float]:
    """Write the synthetic token table as Parquet shards; returns the size in MiB and the
    seconds spent adding successors (``layerlaws.text.tokens.with_successors``)."""
    from layerlaws.text.tokens import with_successors

    rng = np.random.default_rng(0)
    lengths = rng.integers(10, 301, size=n_rows // 10)
    lengths = lengths[: np.searchsorted(np.cumsum(lengths), n_rows) + 1]
    lengths[-1] -= lengths.sum() - n_rows
    sentence = np.repeat(np.arange(len(lengths), dtype=np.int64), lengths)
    starts = np.concatenate([[0], np.cumsum(lengths)[:-1]])
    position = (np.arange(n_rows) - np.repeat(starts, lengths)).astype(np.int32)
    token = (rng.zipf(1.2, size=n_rows) % VOCAB).astype(np.int64)
    table = pl.DataFrame(
        {
            "sentence_id": sentence,
            "position": position,
            "token_id": token,
            "is_special": position == 0,
        }
    )
    bounds = np.linspace(0, len(lengths), SHARDS + 1).astype(int)
    successor_seconds = 0.0
    for index in range(SHARDS):
        part = table.filter(pl.col("sentence_id").is_between(bounds[index], bounds[index + 1] - 1))
        started = time.perf_counter()
        part = with_successors(part)
        successor_seconds += time.perf_counter() - started
        part.write_parquet(folder / f"shard_{index:05d}.parquet")
    return int(table.estimated_size() / 2**20), successor_seconds


def count_duckdb(folder: Path, out: Path, memory_mb: int | None) -> None:
    from layerlaws.signatures.counting import BIGRAMS_SQL, connect

    connection = connect(memory_mb or 16_000, folder / "spill", threads=2)
    files = sorted(folder.glob("shard_*.parquet"))
    query = BIGRAMS_SQL.format(files="[" + ", ".join(f"'{f}'" for f in files) + "]")
    connection.execute(f"COPY ({query}) TO '{out}' (FORMAT parquet)")


def count_polars(folder: Path, out: Path) -> None:
    tokens = pl.scan_parquet(sorted(folder.glob("shard_*.parquet")))
    following = tokens.select(
        "sentence_id",
        (pl.col("position") - 1).alias("position"),
        pl.col("token_id").alias("next_token"),
        pl.col("is_special").alias("next_special"),
    )
    bigrams = (
        tokens.join(following, on=["sentence_id", "position"])
        .filter(~pl.col("is_special") & ~pl.col("next_special"))
        .group_by(pl.col("token_id").alias("token"), "next_token")
        .agg(pl.len().cast(pl.Int64).alias("count"))
    )
    bigrams.sink_parquet(out)


def count_counter(folder: Path, out: Path) -> None:
    counts: collections.Counter = collections.Counter()
    for shard in sorted(folder.glob("shard_*.parquet")):
        table = pl.read_parquet(shard)
        sentence = table["sentence_id"].to_numpy()
        token = table["token_id"].to_numpy()
        text = ~table["is_special"].to_numpy()
        same = (sentence[1:] == sentence[:-1]) & text[1:] & text[:-1]
        counts.update(zip(token[:-1][same].tolist(), token[1:][same].tolist(), strict=True))
    pl.DataFrame(
        [(a, b, c) for (a, b), c in counts.items()],
        schema={"token": pl.Int64, "next_token": pl.Int64, "count": pl.Int64},
        orient="row",
    ).write_parquet(out)


def child(method: str, folder: Path, out: Path, memory_mb: int | None) -> None:
    started = time.perf_counter()
    if method == "duckdb":
        count_duckdb(folder, out, memory_mb)
    elif method == "polars":
        count_polars(folder, out)
    else:
        count_counter(folder, out)
    seconds = time.perf_counter() - started
    print(json.dumps({"seconds": seconds, "peak_mb": peak_rss_mib()}))


def run_once(method: str, folder: Path, out: Path, memory_mb: int | None) -> dict:
    """One run of ``method`` in a fresh process: its seconds and peak memory, or its error."""
    arguments = [method, str(folder), str(out), str(memory_mb or 0)]
    command = [sys.executable, __file__, "--child", *arguments]
    result = subprocess.run(command, capture_output=True, text=True, check=False)
    if result.returncode != 0:
        error = result.stderr.strip().splitlines()[-1]
        return {"seconds": float("nan"), "peak_mb": float("nan"), "error": error}
    return json.loads(result.stdout.strip().splitlines()[-1])


def run(method: str, folder: Path, memory_mb: int | None = None) -> tuple[dict, pl.DataFrame]:
    """``REPEATS`` runs of ``method``: the best time, the largest peak, the counts."""
    out = folder / f"{method}-{memory_mb}.parquet"
    runs = [run_once(method, folder, out, memory_mb) for _ in range(REPEATS)]
    failed = [run for run in runs if "error" in run]
    if failed:
        return failed[0], pl.DataFrame()
    measured = {
        "seconds": min(run["seconds"] for run in runs),
        "peak_mb": max(run["peak_mb"] for run in runs),
    }
    return measured, pl.read_parquet(out).sort("token", "next_token")


def main() -> None:
    n_rows = int(sys.argv[1]) if len(sys.argv) > 1 else 50_000_000
    with tempfile.TemporaryDirectory() as name:
        folder = Path(name)
        size_mb, successor_seconds = synthesise(n_rows, folder)
        print(f"synthetic table: {n_rows:,} rows, {size_mb} MiB in memory, {SHARDS} shards")
        print(f"successor ids written at tokenisation: {successor_seconds:.2f} s in all")
        results = {}
        for method in ("duckdb", "polars", "counter"):
            measured, counts = run(method, folder)
            results[method] = (measured, counts)
            print(
                f"{method:8s} {measured['seconds']:8.2f} s  peak RSS {measured['peak_mb']:8.0f} MiB"
            )
        limit = max(64, size_mb // 4)
        limited, limited_counts = run("duckdb", folder, memory_mb=limit)
        print(
            f"duckdb with memory_limit={limit} MiB: {limited['seconds']:.2f} s, peak RSS "
            f"{limited['peak_mb']:.0f} MiB {limited.get('error', '')}".rstrip()
        )
        reference = results["duckdb"][1]
        same = all(counts.equals(reference) for _, counts in results.values())
        limited_ok = limited_counts.equals(reference)
        print(
            f"{len(reference):,} distinct bigrams, {reference['count'].sum():,} in all; "
            f"all methods agree: {same}"
        )
        duck = results["duckdb"][0]["seconds"]
        print(
            f"duckdb_vs_counter={results['counter'][0]['seconds'] / duck:.2f} "
            f"duckdb_vs_polars={results['polars'][0]['seconds'] / duck:.2f} "
            f"limited_memory_ok={str(limited_ok and same).lower()}"
        )


if __name__ == "__main__":
    if sys.argv[1:2] == ["--child"]:
        child(sys.argv[2], Path(sys.argv[3]), Path(sys.argv[4]), int(sys.argv[5]) or None)
    else:
        main()
