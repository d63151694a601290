"""Signatures and their comparisons against direct (dense, loop-based) computations."""

import numpy as np
import polars as pl
import pytest
import scipy.stats

from layerlaws.core.geometry import cosine_matrix, r_cos
from layerlaws.signatures.comparison import (
    analysis_tokens,
    compare,
    decile_profile,
    per_token_agreement,
    percentile_bins,
    percentiles,
    pooled_deciles,
    signature_rows,
)

VOCAB = 30
DECILE_COLUMNS = ["matrix", "signature", "decile", "mean", "q25", "median", "q75", "n_pairs"]
"""The columns of a decile profile, per corpus and pooled (percentiles.csv,
pooled_deciles.csv)."""


@pytest.fixture
def counts():
    rng = np.random.default_rng(0)
    pairs = rng.integers(0, VOCAB, size=(4000, 2))
    pairs[:, 1] = (pairs[:, 0] * 7 + rng.integers(0, 4, size=4000)) % VOCAB  # structure
    bigrams = (
        pl.DataFrame({"token": pairs[:, 0], "next_token": pairs[:, 1]})
        .group_by("token", "next_token")
        .agg(pl.len().cast(pl.Int64).alias("count"))
    )
    unigrams = pl.DataFrame({"token": np.arange(VOCAB), "count": np.arange(VOCAB) + 100})
    return unigrams, bigrams


def dense_signatures(bigrams: pl.DataFrame):
    counts = np.zeros((VOCAB, VOCAB))
    for a, b, c in bigrams.iter_rows():
        counts[a, b] += c
    return counts / counts.sum(1, keepdims=True), counts.T / counts.T.sum(1, keepdims=True)


def test_signature_rows_are_distributions_matching_dense_counts(counts):
    unigrams, bigrams = counts
    tokens = analysis_tokens(unigrams, bigrams, 10)
    assert list(tokens) == list(range(VOCAB - 1, VOCAB - 11, -1))  # most frequent first
    rows = signature_rows(bigrams, tokens, VOCAB)
    np.testing.assert_allclose(rows["next"].sum(axis=1), 1.0)
    np.testing.assert_allclose(rows["pre"].sum(axis=1), 1.0)
    next_dense, pre_dense = dense_signatures(bigrams)
    np.testing.assert_allclose(rows["next"].toarray(), next_dense[tokens])
    np.testing.assert_allclose(rows["pre"].toarray(), pre_dense[tokens])
    np.testing.assert_allclose(rows["tilde"].toarray(), next_dense[tokens] + pre_dense[tokens])


def test_tokens_without_a_predecessor_are_left_out():
    bigrams = pl.DataFrame({"token": [1, 2], "next_token": [2, 3], "count": [5, 5]})
    unigrams = pl.DataFrame({"token": [1, 2, 3], "count": [9, 8, 7]})
    assert analysis_tokens(unigrams, bigrams, 10).tolist() == [2]


def test_sparse_cosine_equals_dense(counts):
    unigrams, bigrams = counts
    rows = signature_rows(bigrams, analysis_tokens(unigrams, bigrams, 12), VOCAB)["next"]
    dense = rows.toarray()
    unit = dense / np.linalg.norm(dense, axis=1, keepdims=True)
    np.testing.assert_allclose(cosine_matrix(rows), unit @ unit.T, atol=1e-6)
    np.testing.assert_allclose(cosine_matrix(dense), unit @ unit.T, atol=1e-6)


def test_rcos_is_one_for_the_signatures_themselves_and_near_zero_for_random(counts):
    unigrams, bigrams = counts
    rows = signature_rows(bigrams, analysis_tokens(unigrams, bigrams, 25), VOCAB)["next"]
    signature_cos = cosine_matrix(rows)
    assert r_cos(cosine_matrix(rows.toarray()), signature_cos) == pytest.approx(1.0, abs=1e-6)
    rng = np.random.default_rng(1)
    random_a, random_b = (cosine_matrix(rng.normal(size=(400, 64))) for _ in range(2))
    # 79,800 pairs: the sample correlation of independent matrices is within a few 1e-3 of 0.
    assert abs(r_cos(random_a, random_b)) < 0.02


@pytest.mark.parametrize("include_diagonal", [True, False])
def test_per_token_agreement_matches_a_loop(include_diagonal):
    """The paper's view correlates whole rows (mean = (1/C)·cos·1); the other leaves the
    token itself out."""
    rng = np.random.default_rng(2)
    a = cosine_matrix(rng.normal(size=(40, 8)))
    b = cosine_matrix(a @ rng.normal(size=(40, 40)) * 0.1 + rng.normal(size=(40, 40)))
    correlation, mean = per_token_agreement(a, b, include_diagonal, chunk_rows=7)
    for i in range(40):
        keep = np.ones(40, dtype=bool) if include_diagonal else np.arange(40) != i
        assert correlation[i] == pytest.approx(np.corrcoef(a[i, keep], b[i, keep])[0, 1], abs=1e-6)
        assert mean[i] == pytest.approx(a[i, keep].mean(), abs=1e-6)


def test_percentiles_and_decile_profile():
    values = np.array([5.0, 1.0, 3.0, 3.0])
    np.testing.assert_allclose(percentiles(values), [87.5, 12.5, 50.0, 50.0])
    embedding = np.linspace(0, 99.9, 1000)
    profile = decile_profile(embedding, embedding[::-1].copy())
    assert profile["decile"].to_list() == list(range(1, 11))
    assert profile["n_pairs"].to_list() == [100] * 10
    assert profile["mean"].to_list() == pytest.approx(
        [99.9 - embedding[i * 100 : i * 100 + 100].mean() for i in range(10)]
    )


def test_compare_gives_all_views(counts):
    unigrams, bigrams = counts
    tokens = analysis_tokens(unigrams, bigrams, 20)
    rows = signature_rows(bigrams, tokens, VOCAB)
    signature_cos = {name: cosine_matrix(matrix) for name, matrix in rows.items()}
    rng = np.random.default_rng(3)
    embedding_cos = {
        "W_E": cosine_matrix(rng.normal(size=(20, 6))),
        "W_U": cosine_matrix(rows["pre"].toarray()),
    }
    rcos, per_token, deciles, bins = compare(
        embedding_cos, signature_cos, tokens, [str(t) for t in tokens]
    )
    assert bins.columns == ["matrix", "signature", "decile", "bin", "n_pairs"]
    counted = bins.group_by("matrix", "signature", "decile").agg(pl.col("n_pairs").sum())
    expected = deciles.select("matrix", "signature", "decile", "n_pairs")
    assert counted.sort("matrix", "signature", "decile").equals(
        expected.sort("matrix", "signature", "decile")
    )
    assert rcos.columns == ["matrix", "signature", "r_cos", "n_tokens"]
    assert rcos.filter((pl.col("matrix") == "W_U") & (pl.col("signature") == "pre"))["r_cos"][
        0
    ] == pytest.approx(1.0, abs=1e-6)
    assert per_token.columns == [
        "matrix",
        "signature",
        "token",
        "text",
        "correlation",
        "mean_similarity",
    ]
    assert len(per_token) == 4 * 20
    assert deciles.columns == DECILE_COLUMNS
    assert (
        deciles.group_by("matrix", "signature").agg(pl.col("n_pairs").sum())["n_pairs"].to_list()
        == [190] * 4
    )


def test_rcos_of_every_pair_is_pearson_not_spearman(counts):
    """R_cos of ``compare``, pair by pair, against scipy's Pearson r of the off-diagonal
    entries. The embedding similarities are strongly non-linear functions (a noisy cube, an
    exponential) of the signatures' cosines, so Pearson and Spearman differ by far more
    than the tolerance and a rank correlation cannot pass."""
    unigrams, bigrams = counts
    tokens = analysis_tokens(unigrams, bigrams, 20)
    rows = signature_rows(bigrams, tokens, VOCAB)
    signature_cos = {name: cosine_matrix(matrix) for name, matrix in rows.items()}
    rng = np.random.default_rng(5)
    base = signature_cos["next"] ** 3 + 0.05 * rng.normal(size=(20, 20))
    embedding_cos = {"W_E": (base + base.T) / 2, "W_U": np.exp(4 * signature_cos["pre"])}
    rcos, _, _, _ = compare(embedding_cos, signature_cos, tokens, [str(t) for t in tokens])
    upper = np.triu_indices(20, k=1)
    pairs = list(zip(rcos["matrix"], rcos["signature"], strict=True))
    pearson, spearman = (
        [
            correlation(embedding_cos[matrix][upper], signature_cos[signature][upper]).statistic
            for matrix, signature in pairs
        ]
        for correlation in (scipy.stats.pearsonr, scipy.stats.spearmanr)
    )
    assert np.abs(np.subtract(pearson, spearman)).max() > 0.01
    np.testing.assert_allclose(rcos["r_cos"].to_numpy(), pearson, rtol=0, atol=1e-10)


def test_corpora_pool_into_one_decile_profile_with_its_quartiles():
    """Two corpora's pairs (percentiles ranked within each) pooled from their tables alone:
    the mean and pair counts exactly, the quartiles within one percentile point of numpy's
    quantiles of the concatenated pairs (Yao & Xu Fig. 5D–E, 11)."""
    rng = np.random.default_rng(5)
    tables, bins, pooled_embedding, pooled_signature = [], [], [], []
    for size in (4000, 2500):
        embedding = percentiles(rng.normal(size=size))
        signature = percentiles(embedding + rng.normal(scale=30.0, size=size))
        label = (pl.lit("W_E").alias("matrix"), pl.lit("next").alias("signature"))
        tables.append(decile_profile(embedding, signature).select(*label, pl.all()))
        bins.append(percentile_bins(embedding, signature).select(*label, pl.all()))
        pooled_embedding.append(embedding)
        pooled_signature.append(signature)
    pooled = pooled_deciles(pl.concat(tables), pl.concat(bins)).sort("decile")
    assert pooled.columns == DECILE_COLUMNS
    embedding, signature = np.concatenate(pooled_embedding), np.concatenate(pooled_signature)
    decile = np.minimum(embedding // 10, 9).astype(int) + 1
    groups = [signature[decile == k].astype(np.float64) for k in range(1, 11)]
    assert pooled["n_pairs"].to_list() == [len(group) for group in groups]
    np.testing.assert_allclose(pooled["mean"], [group.mean() for group in groups], rtol=1e-9)
    for name, q in (("q25", 0.25), ("median", 0.5), ("q75", 0.75)):
        expected = [np.quantile(group, q) for group in groups]
        np.testing.assert_allclose(pooled[name], expected, rtol=0, atol=1.0, err_msg=name)
