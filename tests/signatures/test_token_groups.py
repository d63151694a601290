"""Chosen token groups (Yao & Xu Fig. 12): cos(W_E) and cos(φ_next) over the group and
each token's most frequent next tokens, against NumPy references computed from a tiny
corpus's token sequences (the pipeline's side goes through DuckDB's counts), and the
strings a tokenizer cannot spell as one token."""

from __future__ import annotations

import re

import numpy as np
import polars as pl
import pytest
from matplotlib import pyplot as plt

from layerlaws.core.errors import LayerlawsError
from layerlaws.signatures.counting import connect, count_tokens
from layerlaws.signatures.plots import plot_token_group
from layerlaws.signatures.token_groups import (
    group_cosines,
    group_token_ids,
    next_tokens,
    successor_counts,
)
from tests.signatures.test_counting import token_table

GROUP = np.array([7, 3, 15, 21, 0])
"""Token ids of the group: 21 never occurs in the corpus (its ids are 0–19)."""
TEXTS = ["seven", "three", "fifteen", "absent", "zero"]


@pytest.fixture(scope="module")
def corpus(tmp_path_factory):
    """(the token table, the path of its DuckDB-counted bigrams, W_E (100, 6) float32)."""
    folder = tmp_path_factory.mktemp("group_counts")
    table = token_table(3, 200)
    table.write_parquet(folder / "shard_0.parquet")
    count_tokens(
        connect(256, folder / "spill", threads=1),
        [folder / "shard_0.parquet"],
        folder / "unigrams.parquet",
        folder / "bigrams.parquet",
    )
    embeddings = np.random.default_rng(4).normal(size=(100, 6)).astype(np.float32)
    return table, folder / "bigrams.parquet", embeddings


def pair_counts(table: pl.DataFrame, size: int) -> np.ndarray:
    """(size, size) counts of adjacent text tokens of one sequence, from the sequences."""
    counts = np.zeros((size, size))
    for _, sequence in table.sort("sentence_id", "position").group_by("sentence_id"):
        ids = sequence["token_id"].to_numpy()
        text = ~sequence["is_special"].to_numpy()
        both = text[:-1] & text[1:]
        np.add.at(counts, (ids[:-1][both], ids[1:][both]), 1)
    return counts


def row_cosines(rows: np.ndarray) -> np.ndarray:
    """cos of every pair of rows, float64; a zero row gives NaN."""
    with np.errstate(invalid="ignore"):
        unit = rows / np.linalg.norm(rows, axis=1, keepdims=True)
    return unit @ unit.T


def square(table: pl.DataFrame, matrix: str) -> np.ndarray:
    """The (n, n) matrix ``matrix`` of a long-form cosine table."""
    block = table.filter(pl.col("matrix") == matrix)
    return block["cosine"].to_numpy().reshape(len(GROUP), len(GROUP))


def test_group_cosines_equal_the_embedding_and_next_token_distributions(corpus):
    table, bigrams_path, embeddings = corpus
    counts = pair_counts(table, 100)
    assert counts[21].sum() == 0 and all(counts[token].sum() > 0 for token in (7, 3, 15, 0))
    with np.errstate(invalid="ignore"):
        phi_next = counts[GROUP] / counts[GROUP].sum(axis=1, keepdims=True)
    cosines = group_cosines(successor_counts(bigrams_path, GROUP), embeddings, GROUP, TEXTS)
    np.testing.assert_allclose(
        square(cosines, "W_E"),
        row_cosines(embeddings[GROUP].astype(np.float64)),
        rtol=1e-12,
        atol=1e-12,
    )
    expected = row_cosines(phi_next)
    assert np.isnan(expected[3]).all() and np.isnan(expected[:, 3]).all()
    np.testing.assert_allclose(square(cosines, "next"), expected, rtol=1e-12, atol=1e-12)
    labels = cosines.filter(pl.col("matrix") == "next").select("row_text", "column_text").rows()
    assert labels == [(row, column) for row in TEXTS for column in TEXTS]
    assert cosines["row_token"].to_list()[: len(GROUP)] == [7] * len(GROUP)


def expected_next_tokens(counts, tokens, texts, decode, count):
    """Rows (token, text, rank, next token, its text, pair count, probability) of the
    ``count`` most frequent successors of each token (ties: smaller id), from dense pair
    ``counts`` (V, V)."""
    expected = []
    for token, text in zip(tokens, texts, strict=True):
        followers = sorted(np.flatnonzero(counts[token]), key=lambda t: (-counts[token, t], t))
        for rank, follower in enumerate(followers[:count], start=1):
            share = counts[token, follower] / counts[token].sum()
            expected.append(
                (token, text, rank, follower, decode(follower), counts[token, follower], share)
            )
    return expected


def assert_next_tokens(listed: pl.DataFrame, expected: list[tuple]) -> None:
    assert listed.columns == [
        "token",
        "text",
        "rank",
        "next_token",
        "next_text",
        "count",
        "probability",
    ]
    assert listed.drop("probability").rows() == [row[:-1] for row in expected]
    np.testing.assert_allclose(listed["probability"].to_numpy(), [row[-1] for row in expected])


def test_next_tokens_are_the_most_frequent_successors_with_their_probabilities(corpus):
    table, bigrams_path, _ = corpus
    bigrams = successor_counts(bigrams_path, GROUP)
    listed = next_tokens(bigrams, GROUP, TEXTS, lambda token: f"<{token}>", count=3)
    expected = expected_next_tokens(
        pair_counts(table, 100), GROUP, TEXTS, lambda token: f"<{token}>", 3
    )
    assert len(listed) == 12 and "absent" not in listed["text"].to_list()
    assert_next_tokens(listed, expected)


def grey_pixels(path) -> int:
    """Pixels of the grey (0.8) that marks a NaN cosine in a PNG figure."""
    image = plt.imread(path)[..., :3]
    return int(np.all(np.abs(image - 0.8) < 0.01, axis=-1).sum())


def test_the_heatmaps_draw_an_absent_tokens_row_and_column_grey(corpus, tmp_path):
    _, bigrams_path, embeddings = corpus
    options = {"width": 6, "dpi": 60, "format": "png"}
    grey = {}
    for name, chosen in (("with_absent", GROUP), ("present", GROUP[GROUP != 21])):
        texts = [TEXTS[list(GROUP).index(token)] for token in chosen]
        cosines = group_cosines(successor_counts(bigrams_path, chosen), embeddings, chosen, texts)
        plot_token_group(cosines, path=tmp_path / f"{name}.png", title=name, options=options)
        grey[name] = grey_pixels(tmp_path / f"{name}.png")
    # 9 of the 25 cells of a panel are grey (3,641 pixels measured); without a NaN only the
    # antialiased edges of letters happen to be this grey (60 measured).
    assert grey["with_absent"] > 1000 and grey["present"] < 200, grey


def test_a_group_token_is_one_token_of_the_tokenizer(tokenizer):
    vocabulary = tokenizer.get_vocab()
    ids = group_token_ids(["the", "of"], tokenizer, "signatures.token_groups.g.tokens")
    np.testing.assert_array_equal(ids, [vocabulary["the"], vocabulary["of"]])
    where = "signatures.token_groups.g.tokens"
    with pytest.raises(
        LayerlawsError,
        match=re.escape(
            f"config {where}: 'of the' is not one token of this model's tokenizer but 2: "
            "['of', 'the']"
        ),
    ):
        group_token_ids(["the", "of the"], tokenizer, where)
    with pytest.raises(LayerlawsError, match="'qwxz' is not in this model's vocabulary"):
        group_token_ids(["qwxz"], tokenizer, where)
    with pytest.raises(LayerlawsError, match="'the' and 'the ' are the same token"):
        group_token_ids(["the", "the "], tokenizer, where)
