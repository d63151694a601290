"""Probability signatures (Yao & Xu, §4 and §6) against the geometry of a model's embeddings.

From within-sequence bigram counts: φ_next[s] is the distribution of the token after s,
φ_pre[s] that of the token before s, φ̃[s] = φ_next[s] + φ_pre[s]. For the C most frequent
tokens that have both a successor and a predecessor in the corpus (so that every row is
defined), cosine-similarity matrices of the signature rows are compared with those of the
input (W_E) and output (W_U) embedding rows of the same tokens. Signature rows are sparse
(C × V, CSR) and never densified; similarity matrices are dense (C × C, float32: cosines
need no more). Every accumulated statistic (correlations, means) is computed in float64.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import polars as pl
from scipy import sparse, stats

from layerlaws.core.errors import LayerlawsError
from layerlaws.core.geometry import cosine_matrix, off_diagonal, r_cos
from layerlaws.signatures.settings import SignatureSettings

PAIRS = (
    ("W_E", "next"),
    ("W_U", "pre"),
    ("W_E", "tilde"),
    ("W_U", "tilde"),
    ("W_E", "pre"),
    ("W_U", "next"),
)
"""(embedding, signature) pairs compared; the first four are the paper's."""
PROFILED_PAIRS = PAIRS[:4]
"""Pairs with per-token and percentile views."""


def analysis_tokens(unigrams: pl.DataFrame, bigrams: pl.DataFrame, count: int) -> np.ndarray:
    """Ids of the ``count`` most frequent tokens (ties by id) that occur at least once with
    a next and once with a previous token, most frequent first; shape (≤ count,) int64."""
    has_next = bigrams.select("token").unique()
    has_previous = bigrams.select(pl.col("next_token").alias("token")).unique()
    eligible = unigrams.join(has_next, on="token", how="semi").join(
        has_previous, on="token", how="semi"
    )
    ranked = eligible.sort(["count", "token"], descending=[True, False])
    return ranked["token"].head(count).to_numpy().astype(np.int64)


def _row_normalised(
    rows: np.ndarray, columns: np.ndarray, counts: np.ndarray, shape: tuple[int, int]
) -> sparse.csr_matrix:
    matrix = sparse.csr_matrix((counts.astype(np.float64), (rows, columns)), shape=shape)
    totals = np.asarray(matrix.sum(axis=1)).ravel()
    return sparse.diags(1.0 / np.where(totals > 0, totals, 1.0)) @ matrix


def signature_rows(
    bigrams: pl.DataFrame, tokens: np.ndarray, vocab_size: int
) -> dict[str, sparse.csr_matrix]:
    """φ_next, φ_pre and φ̃ for ``tokens``: CSR matrices (len(tokens), vocab_size), rows of
    φ_next and φ_pre summing to 1 (all zero for a token without a next, or previous, token
    in ``bigrams``)."""
    largest = [int(bigrams[column].max() or 0) for column in ("token", "next_token")]
    slot = np.full(
        max(vocab_size, *(value + 1 for value in largest)),
        -1,
        dtype=np.int64,
    )
    slot[tokens] = np.arange(len(tokens))
    current = bigrams["token"].to_numpy()
    following = bigrams["next_token"].to_numpy()
    counts = bigrams["count"].to_numpy()
    shape = (len(tokens), len(slot))
    mine = slot[current] >= 0
    next_rows = _row_normalised(slot[current[mine]], following[mine], counts[mine], shape)
    mine = slot[following] >= 0
    pre_rows = _row_normalised(slot[following[mine]], current[mine], counts[mine], shape)
    return {"next": next_rows, "pre": pre_rows, "tilde": (next_rows + pre_rows).tocsr()}


def per_token_agreement(
    embedding_cos: np.ndarray,
    signature_cos: np.ndarray,
    include_diagonal: bool = True,
    chunk_rows: int = 1024,
) -> tuple[np.ndarray, np.ndarray]:
    """For each token (row), the Pearson correlation of its rows of the two matrices and the
    mean of its embedding-similarity row; two arrays of shape (n,). With
    ``include_diagonal`` (Yao & Xu Fig. 5C) the whole row, the token itself included, and
    mean = (1/C)·cos·1; otherwise the diagonal is left out.

    Row sums are taken in float64, chunk by chunk, and the diagonal's share subtracted
    when it is left out.
    """
    n = len(embedding_cos)
    others = n if include_diagonal else n - 1
    keep = 0.0 if include_diagonal else 1.0
    correlations, means = np.empty(n), np.empty(n)
    for start in range(0, n, chunk_rows):
        rows = slice(start, min(start + chunk_rows, n))
        x = embedding_cos[rows].astype(np.float64)
        y = signature_cos[rows].astype(np.float64)
        index = np.arange(rows.start, rows.stop)
        x_ii, y_ii = keep * x[index - start, index], keep * y[index - start, index]
        sum_x, sum_y = x.sum(axis=1) - x_ii, y.sum(axis=1) - y_ii
        cross = np.einsum("ij,ij->i", x, y) - x_ii * y_ii - sum_x * sum_y / others
        var_x = np.einsum("ij,ij->i", x, x) - x_ii**2 - sum_x**2 / others
        var_y = np.einsum("ij,ij->i", y, y) - y_ii**2 - sum_y**2 / others
        with np.errstate(invalid="ignore", divide="ignore"):
            correlations[rows] = cross / np.sqrt(var_x * var_y)
        means[rows] = sum_x / others
    return correlations, means


def _labelled(tables: Sequence[pl.DataFrame], labels: Sequence[Mapping[str, str]]) -> pl.DataFrame:
    """One table of several tables (same columns), each led by its label's columns."""
    return pl.concat(
        [
            table.select(*(pl.lit(value).alias(name) for name, value in label.items()), pl.all())
            for table, label in zip(tables, labels, strict=True)
        ]
    )


def by_corpus(tables: Sequence[pl.DataFrame], corpora: Sequence[str]) -> pl.DataFrame:
    """One table of several corpora's tables (same columns), a first column ``corpus``."""
    return _labelled(tables, [{"corpus": corpus} for corpus in corpora])


def by_run(tables: Sequence[pl.DataFrame], runs: Sequence[Sequence[str]]) -> pl.DataFrame:
    """One table of several (model, corpus) runs' tables (same columns), first columns
    ``model`` and ``corpus``: each model of a ``signatures.own_corpus`` group on its own
    training corpus (Yao & Xu Fig. 5B)."""
    return _labelled(tables, [{"model": model, "corpus": corpus} for model, corpus in runs])


QUARTILES = {"q25": 0.25, "median": 0.5, "q75": 0.75}
"""The quartile columns of a decile profile and their quantiles."""


def pooled_bins(bins: pl.DataFrame) -> pl.DataFrame:
    """The histograms of several corpora's signature percentiles in each embedding decile
    added up (each corpus's pairs ranked within it; Yao & Xu Fig. 11): ``bins`` the stacked
    ``percentile_bins`` tables; columns matrix, signature, decile, bin, n_pairs."""
    keys = ["matrix", "signature", "decile", "bin"]
    return bins.group_by(*keys).agg(pl.col("n_pairs").sum()).sort(*keys)


def pooled_deciles(deciles: pl.DataFrame, bins: pl.DataFrame) -> pl.DataFrame:
    """The decile profile of several corpora pooled (Yao & Xu, Appendix C.1, Figs. 5D–E
    and 11): each corpus's similarity pairs ranked within that corpus, then the pairs of
    every corpus taken together, so a decile's mean signature percentile is the
    pair-weighted mean of the corpora's, Σ n_pairs·mean / Σ n_pairs, and its quartiles
    those of the summed histograms (``percentile_bins``; ``binned_quantile``, exact to one
    percentile point). ``deciles``: the stacked percentile tables (matrix, signature,
    decile, mean, n_pairs, …); ``bins``: the stacked bin tables; result columns matrix,
    signature, decile, mean, q25, median, q75, n_pairs."""
    keys = ["matrix", "signature", "decile"]
    weighted = (pl.col("mean") * pl.col("n_pairs")).sum() / pl.col("n_pairs").sum()
    means = deciles.group_by(*keys, maintain_order=True).agg(
        weighted.alias("mean"), pl.col("n_pairs").sum()
    )
    quartiles = []
    for key, block in pooled_bins(bins).group_by(*keys):
        values, counts = block["bin"].to_numpy(), block["n_pairs"].to_numpy()
        quartiles.append(
            dict(zip(keys, key, strict=True))
            | {name: binned_quantile(values, counts, q) for name, q in QUARTILES.items()}
        )
    table = pl.DataFrame(
        quartiles,
        schema={
            **dict.fromkeys(keys[:2], pl.String),
            "decile": pl.Int64,
            **dict.fromkeys(QUARTILES, pl.Float64),
        },
    )
    return means.join(table, on=keys, how="left").select(*keys, "mean", *QUARTILES, "n_pairs")


def percentiles(values: np.ndarray) -> np.ndarray:
    """Percentile (0–100) of each value among all of them, ties sharing their mean rank."""
    return ((stats.rankdata(values) - 0.5) * (100.0 / len(values))).astype(np.float32)


PERCENTILE_BINS = 100
"""Bins of the signature percentile in ``percentile_bins``: one percentile point each."""


def deciles_of(embedding_percentile: np.ndarray) -> np.ndarray:
    """The decile (1–10) of each embedding-similarity percentile (0–100)."""
    return np.minimum((embedding_percentile // 10).astype(np.int64), 9) + 1


def percentile_bins(
    embedding_percentile: np.ndarray, signature_percentile: np.ndarray
) -> pl.DataFrame:
    """The signature percentile's histogram in each decile of the embedding percentile:
    columns decile (1–10), bin (0…``PERCENTILE_BINS`` − 1: percentiles [bin, bin + 1)),
    n_pairs (the empty bins left out). Histograms add, so corpora pool exactly
    (``pooled_deciles``)."""
    width = 100.0 / PERCENTILE_BINS
    bins = np.minimum(signature_percentile.astype(np.float64) // width, PERCENTILE_BINS - 1)
    frame = pl.DataFrame({"decile": deciles_of(embedding_percentile), "bin": bins.astype(np.int64)})
    return (
        frame.group_by("decile", "bin")
        .agg(pl.len().cast(pl.Int64).alias("n_pairs"))
        .sort("decile", "bin")
    )


def binned_quantile(bins: np.ndarray, counts: np.ndarray, q: float) -> float:
    """The q-quantile of percentiles binned by ``percentile_bins`` (bin indices ``bins``,
    their ``counts``), linear within its bin: exact to a bin's width."""
    order = np.argsort(bins)
    bins, counts = bins[order], counts[order].astype(np.float64)
    target = q * counts.sum()
    cumulative = np.cumsum(counts)
    at = int(np.searchsorted(cumulative, target))
    below = cumulative[at] - counts[at]
    width = 100.0 / PERCENTILE_BINS
    return float((bins[at] + (target - below) / counts[at]) * width)


def decile_profile(
    embedding_percentile: np.ndarray, signature_percentile: np.ndarray
) -> pl.DataFrame:
    """Distribution of the signature percentile in each decile of the embedding percentile:
    columns decile (1–10), mean, q25, median, q75, n_pairs."""
    decile = deciles_of(embedding_percentile)
    frame = pl.DataFrame({"decile": decile, "value": signature_percentile.astype(np.float64)})
    return (
        frame.group_by("decile")
        .agg(
            pl.col("value").mean().alias("mean"),
            pl.col("value").quantile(0.25).alias("q25"),
            pl.col("value").median().alias("median"),
            pl.col("value").quantile(0.75).alias("q75"),
            pl.len().cast(pl.Int64).alias("n_pairs"),
        )
        .sort("decile")
    )


def compare(
    embedding_cos: Mapping[str, np.ndarray],
    signature_cos: Mapping[str, np.ndarray],
    tokens: np.ndarray,
    labels: list[str],
    per_token_diagonal: str = "include",
) -> tuple[pl.DataFrame, pl.DataFrame, pl.DataFrame, pl.DataFrame]:
    """The views of every pair: ``rcos`` (matrix, signature, r_cos, n_tokens),
    ``per_token`` (matrix, signature, token, text, correlation, mean_similarity; each row
    with its diagonal entry if ``per_token_diagonal`` is ``include``) and ``percentiles``
    (matrix, signature, decile, mean, q25, median, q75, n_pairs), and the percentiles'
    histograms per decile, ``bins`` (matrix, signature, decile, bin, n_pairs)."""
    rcos = pl.DataFrame(
        [
            (matrix, signature, r_cos(embedding_cos[matrix], signature_cos[signature]), len(tokens))
            for matrix, signature in PAIRS
        ],
        schema={
            "matrix": pl.String,
            "signature": pl.String,
            "r_cos": pl.Float64,
            "n_tokens": pl.Int64,
        },
        orient="row",
    )
    ranked = {
        name: percentiles(off_diagonal(matrix))
        for name, matrix in {**embedding_cos, **signature_cos}.items()
    }
    token_views, decile_views, bin_views = [], [], []
    for matrix, signature in PROFILED_PAIRS:
        correlation, mean = per_token_agreement(
            embedding_cos[matrix], signature_cos[signature], per_token_diagonal == "include"
        )
        token_views.append(
            pl.DataFrame(
                {
                    "matrix": matrix,
                    "signature": signature,
                    "token": tokens,
                    "text": labels,
                    "correlation": correlation,
                    "mean_similarity": mean,
                }
            )
        )
        labels_of = (pl.lit(matrix).alias("matrix"), pl.lit(signature).alias("signature"))
        profile = decile_profile(ranked[matrix], ranked[signature])
        decile_views.append(profile.select(*labels_of, pl.all()))
        histogram = percentile_bins(ranked[matrix], ranked[signature])
        bin_views.append(histogram.select(*labels_of, pl.all()))
    return rcos, pl.concat(token_views), pl.concat(decile_views), pl.concat(bin_views)


VIEW_TOKENS = 100
"""Most frequent tokens whose similarity submatrices are kept for the heatmaps."""


def digit_tokens(labels: list[str]) -> tuple[np.ndarray, list[str]]:
    """Positions (in ``labels``, the compared tokens' texts, most frequent first) of the
    tokens that spell a number 0–99, one per number (the most frequent), ordered by value;
    and their labels."""
    chosen: dict[int, int] = {}
    for position, label in enumerate(labels):
        text = label.strip()
        if text.isdecimal() and len(text) <= 2 and int(text) not in chosen:
            chosen[int(text)] = position
    values = sorted(chosen)
    return np.array([chosen[v] for v in values], dtype=np.int64), [str(v) for v in values]


def similarity_views(
    matrices: Mapping[str, np.ndarray], labels: list[str]
) -> dict[str, np.ndarray]:
    """Small submatrices for figures: ``top_<name>`` over the VIEW_TOKENS most frequent
    tokens and ``digits_<name>`` over the digit tokens, with ``top_labels`` and
    ``digit_labels``; arrays for ``numpy.savez``."""
    top = np.arange(min(VIEW_TOKENS, len(labels)))
    digits, digit_labels = digit_tokens(labels)
    views: dict[str, np.ndarray] = {
        "top_labels": np.array([labels[i] for i in top]),
        "digit_labels": np.array(digit_labels, dtype=str),
    }
    for name, matrix in matrices.items():
        views[f"top_{name}"] = matrix[np.ix_(top, top)]
        views[f"digits_{name}"] = matrix[np.ix_(digits, digits)]
    return views


@dataclass(frozen=True)
class SignatureComparison:
    """All outputs of the comparison of one corpus's signatures with one model."""

    rcos: pl.DataFrame
    per_token: pl.DataFrame
    percentiles: pl.DataFrame
    percentile_bins: pl.DataFrame
    views: dict[str, np.ndarray]
    summary: dict[str, Any]


def compare_with_embeddings(
    unigrams: pl.DataFrame,
    bigrams: pl.DataFrame,
    *,
    input_embeddings: np.ndarray,
    output_embeddings: np.ndarray,
    tied: bool,
    decode: Callable[[int], str],
    settings: SignatureSettings,
) -> SignatureComparison:
    """Signatures of the ``settings.top_tokens`` most frequent eligible tokens against the
    rows of W_E (V, d) and W_U (V, d) (``tied``: one matrix, W_U's cosines are W_E's);
    tokens whose embedding row is all zero are left out. ``decode`` gives a token's text
    for labels."""
    top_tokens = settings.top_tokens
    tokens = analysis_tokens(unigrams, bigrams, top_tokens)
    nonzero = (np.abs(input_embeddings[tokens]).sum(1) > 0) & (
        np.abs(output_embeddings[tokens]).sum(1) > 0
    )
    tokens = tokens[nonzero]
    if len(tokens) < 3:
        raise LayerlawsError(
            f"only {len(tokens)} tokens have both a next and a previous token in the corpus; "
            f"count a larger corpus"
        )
    labels = [decode(int(token)) for token in tokens]
    signature_cos = {
        name: cosine_matrix(rows, np.float32)
        for name, rows in signature_rows(bigrams, tokens, len(input_embeddings)).items()
    }
    embedding_cos = {"W_E": cosine_matrix(input_embeddings[tokens], np.float32)}
    embedding_cos["W_U"] = (
        embedding_cos["W_E"] if tied else cosine_matrix(output_embeddings[tokens], np.float32)
    )
    rcos, per_token, deciles, bins = compare(
        embedding_cos, signature_cos, tokens, labels, settings.per_token_diagonal
    )
    summary = {
        "tied_embeddings": tied,
        "n_tokens": len(tokens),
        "top_tokens": top_tokens,
        "corpus_text_tokens": int(unigrams["count"].sum()),
        "distinct_tokens": len(unigrams),
        "bigrams": int(bigrams["count"].sum()),
        "distinct_bigrams": len(bigrams),
    }
    views = similarity_views({**embedding_cos, **signature_cos}, labels)
    return SignatureComparison(rcos, per_token, deciles, bins, views, summary)
