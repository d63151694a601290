"""Unigram and within-sequence bigram counts of a tokenised corpus, in DuckDB.

The corpus is a set of Parquet shards with columns ``sentence_id``, ``position``,
``token_id``, ``is_special`` and ``next_token_id`` (``layerlaws.text.tokens.with_successors``).
Only text tokens count: special tokens (BOS, EOS) are left out, and a bigram pairs a token
with the next text token *of the same sequence* (its ``next_token_id``, written at
tokenisation), so no bigram crosses a sequence boundary and counting is one hash
aggregation, no join. DuckDB streams the shards and spills its hash tables to
``temp_directory`` when they outgrow ``memory_limit``, so corpora far larger than memory
can be counted.

Outputs: ``unigrams.parquet`` (``token``, ``count``) and ``bigrams.parquet`` (``token``,
``next_token``, ``count``), all int64.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from pathlib import Path

import duckdb

from layerlaws.core.atomic import atomic_path


def connect(
    memory_limit_mb: int, temp_directory: str | os.PathLike[str], threads: int
) -> duckdb.DuckDBPyConnection:
    """An in-memory DuckDB connection that spills to ``temp_directory`` beyond the limit."""
    Path(temp_directory).mkdir(parents=True, exist_ok=True)
    connection = duckdb.connect(":memory:")
    connection.execute(f"SET memory_limit = '{int(memory_limit_mb)}MB'")
    connection.execute(f"SET temp_directory = '{Path(temp_directory).as_posix()}'")
    connection.execute(f"SET threads = {int(threads)}")
    connection.execute("SET preserve_insertion_order = false")
    return connection


def _files(paths: Sequence[str | os.PathLike[str]]) -> str:
    return "[" + ", ".join(f"'{Path(path).as_posix()}'" for path in paths) + "]"


UNIGRAMS_SQL = """
SELECT token_id AS token, count(*) AS count
FROM read_parquet({files})
WHERE NOT is_special
GROUP BY token_id
"""

# A bigram is a text token and its successor (null when the next token is special or the
# sequence ends): one hash aggregate, which DuckDB spills to disk. The pair is grouped as
# one 64-bit key, token · 2³² + next token (ids are below 2³²), which DuckDB hashes and
# compares faster than two columns (bench/counting.py: about a quarter less time), and
# unpacked on output.
_BIGRAM_KEY = "({token}::UBIGINT << 32) | {next_token}::UBIGINT AS bigram"
_UNPACKED = "(bigram >> 32)::BIGINT AS token, (bigram & 4294967295)::BIGINT AS next_token, count"

BIGRAMS_SQL = f"""
SELECT {_UNPACKED} FROM (
    SELECT {_BIGRAM_KEY.format(token="token_id", next_token="next_token_id")}, count(*) AS count
    FROM read_parquet({{files}})
    WHERE next_token_id IS NOT NULL
    GROUP BY bigram
)
"""

POOL_SQL = {
    "unigrams": "SELECT token, sum(count)::BIGINT AS count FROM read_parquet({files}) "
    "GROUP BY token",
    "bigrams": f"""
SELECT {_UNPACKED} FROM (
    SELECT {_BIGRAM_KEY.format(token="token", next_token="next_token")},
        sum(count)::BIGINT AS count
    FROM read_parquet({{files}})
    GROUP BY bigram
)
""",
}


def _copy(connection: duckdb.DuckDBPyConnection, query: str, out: str | os.PathLike[str]) -> None:
    """The rows of ``query`` into the Parquet file ``out``, sorted by their columns (the
    token ids first): DuckDB's parallel aggregate returns its groups in any order, and the
    same counts should be the same file."""
    ordered = f"SELECT * FROM ({query}) ORDER BY ALL"
    with atomic_path(out) as temporary:
        connection.execute(f"COPY ({ordered}) TO '{temporary.as_posix()}' (FORMAT parquet)")


def count_tokens(
    connection: duckdb.DuckDBPyConnection,
    shards: Sequence[str | os.PathLike[str]],
    unigrams_out: str | os.PathLike[str],
    bigrams_out: str | os.PathLike[str],
) -> None:
    """Count unigrams and within-sequence bigrams of the shards into two Parquet files."""
    files = _files(shards)
    _copy(connection, UNIGRAMS_SQL.format(files=files), unigrams_out)
    _copy(connection, BIGRAMS_SQL.format(files=files), bigrams_out)


def pool_counts(
    connection: duckdb.DuckDBPyConnection,
    kind: str,
    parts: Sequence[str | os.PathLike[str]],
    out: str | os.PathLike[str],
) -> None:
    """Sum the ``kind`` (``unigrams`` or ``bigrams``) counts of several corpora: counts
    of disjoint corpora add up."""
    _copy(connection, POOL_SQL[kind].format(files=_files(parts)), out)
