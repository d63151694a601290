"""DuckDB counting against collections.Counter on small token tables."""

import collections
import itertools

import numpy as np
import polars as pl
import pytest

from layerlaws.signatures.counting import connect, count_tokens, pool_counts
from layerlaws.text.tokens import TOKEN_SCHEMA, with_successors


def token_table(seed: int, n_sequences: int, first_id: int = 0) -> pl.DataFrame:
    """A corpus shard: random sequences (lengths 1–12, ids 0–19) opened by a special token
    99, every fifth also with a special token 98 in its middle."""
    rng = np.random.default_rng(seed)
    rows = []
    for sentence in range(first_id, first_id + n_sequences):
        length = int(rng.integers(1, 13))
        rows.append((sentence, 0, 99, True))
        rows += [(sentence, p, int(rng.integers(0, 20)), False) for p in range(1, length + 1)]
        if sentence % 5 == 0 and length > 2:
            middle = len(rows) - length // 2
            rows[middle] = (sentence, rows[middle][1], 98, True)
    return with_successors(pl.DataFrame(rows, schema=TOKEN_SCHEMA, orient="row"))


def counter_counts(table: pl.DataFrame) -> tuple[collections.Counter, collections.Counter]:
    """Counts by hand: a bigram is two adjacent positions of one sequence, both text."""
    unigrams, bigrams = collections.Counter(), collections.Counter()
    for _, part in table.sort("sentence_id", "position").group_by("sentence_id"):
        rows = list(zip(part["token_id"].to_list(), part["is_special"].to_list(), strict=True))
        unigrams.update(token for token, special in rows if not special)
        bigrams.update(
            (first, second)
            for (first, first_special), (second, second_special) in itertools.pairwise(rows)
            if not first_special and not second_special
        )
    return unigrams, bigrams


def as_counter(frame: pl.DataFrame, keys: list[str]) -> collections.Counter:
    return collections.Counter(
        {
            tuple(row[:-1]) if len(keys) > 1 else row[0]: row[-1]
            for row in frame.select(*keys, "count").iter_rows()
        }
    )


@pytest.fixture
def connection(tmp_path):
    return connect(256, tmp_path / "spill", threads=2)


def test_counts_equal_a_counter_across_shards(tmp_path, connection):
    shards = [token_table(0, 300), token_table(1, 200, first_id=300)]
    for index, shard in enumerate(shards):
        shard.write_parquet(tmp_path / f"shard_{index}.parquet")
    count_tokens(
        connection,
        sorted(tmp_path.glob("shard_*.parquet")),
        tmp_path / "uni.parquet",
        tmp_path / "bi.parquet",
    )
    unigrams, bigrams = counter_counts(pl.concat(shards))
    assert as_counter(pl.read_parquet(tmp_path / "uni.parquet"), ["token"]) == unigrams
    assert as_counter(pl.read_parquet(tmp_path / "bi.parquet"), ["token", "next_token"]) == bigrams
    assert 99 not in unigrams and 98 not in unigrams
    assert not any(98 in pair for pair in bigrams)


def test_no_bigram_crosses_a_sequence_boundary(tmp_path, connection):
    table = with_successors(
        pl.DataFrame(
            [(0, 0, 1, False), (0, 1, 2, False), (1, 0, 3, False), (1, 1, 4, False)],
            schema=TOKEN_SCHEMA,
            orient="row",
        )
    )
    assert table["next_token_id"].to_list() == [2, None, 4, None]
    table.write_parquet(tmp_path / "shard.parquet")
    count_tokens(
        connection, [tmp_path / "shard.parquet"], tmp_path / "u.parquet", tmp_path / "b.parquet"
    )
    pairs = pl.read_parquet(tmp_path / "b.parquet").select("token", "next_token").rows()
    assert sorted(pairs) == [(1, 2), (3, 4)]


def test_pooled_counts_add_up(tmp_path, connection):
    for name, seed in (("a", 0), ("b", 1)):
        token_table(seed, 100).write_parquet(tmp_path / f"{name}.parquet")
        count_tokens(
            connection,
            [tmp_path / f"{name}.parquet"],
            tmp_path / f"{name}-u.parquet",
            tmp_path / f"{name}-b.parquet",
        )
    pool_counts(
        connection,
        "bigrams",
        [tmp_path / "a-b.parquet", tmp_path / "b-b.parquet"],
        tmp_path / "pool.parquet",
    )
    expected = as_counter(
        pl.read_parquet(tmp_path / "a-b.parquet"), ["token", "next_token"]
    ) + as_counter(pl.read_parquet(tmp_path / "b-b.parquet"), ["token", "next_token"])
    assert (
        as_counter(pl.read_parquet(tmp_path / "pool.parquet"), ["token", "next_token"]) == expected
    )


def test_large_token_ids_survive_the_bigram_key(tmp_path, connection):
    """Bigrams are grouped as one 64-bit key (token · 2³² + next token): ids from 0 to
    2³² − 1 come back unchanged as int64, counted and pooled like any other."""
    ids = [0, 1, 65_535, 65_536, 262_143, 2**31 - 1, 2**32 - 1]
    rng = np.random.default_rng(0)
    rows = [
        (sentence, position, ids[int(rng.integers(len(ids)))], False)
        for sentence in range(50)
        for position in range(8)
    ]
    table = with_successors(pl.DataFrame(rows, schema=TOKEN_SCHEMA, orient="row"))
    table.write_parquet(tmp_path / "shard.parquet")
    count_tokens(
        connection, [tmp_path / "shard.parquet"], tmp_path / "u.parquet", tmp_path / "b.parquet"
    )
    pool_counts(connection, "bigrams", [tmp_path / "b.parquet"] * 2, tmp_path / "pool.parquet")
    bigrams = counter_counts(table)[1]
    counted = pl.read_parquet(tmp_path / "b.parquet")
    assert counted.schema == {"token": pl.Int64, "next_token": pl.Int64, "count": pl.Int64}
    assert as_counter(counted, ["token", "next_token"]) == bigrams
    doubled = collections.Counter({pair: 2 * count for pair, count in bigrams.items()})
    assert (
        as_counter(pl.read_parquet(tmp_path / "pool.parquet"), ["token", "next_token"]) == doubled
    )


def test_the_same_counts_are_the_same_file(tmp_path, connection):
    """DuckDB's parallel aggregate returns its groups in any order; the tables are written
    sorted by token (then next token), so counting again writes identical bytes."""
    token_table(0, 3000).write_parquet(tmp_path / "shard.parquet")
    for run in ("first", "second"):
        count_tokens(
            connection,
            [tmp_path / "shard.parquet"],
            tmp_path / f"{run}-u.parquet",
            tmp_path / f"{run}-b.parquet",
        )
    for kind, keys in (("u", ["token"]), ("b", ["token", "next_token"])):
        table = pl.read_parquet(tmp_path / f"first-{kind}.parquet")
        assert len(table) > 1 and table.equals(table.sort(keys))
        first, second = (tmp_path / f"{run}-{kind}.parquet" for run in ("first", "second"))
        assert first.read_bytes() == second.read_bytes()
