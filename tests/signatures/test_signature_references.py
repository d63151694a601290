"""Independent references for every number of the signature tables of a real Snakemake run
(Yao & Xu §4, §6 and Appendix C): the tiny workflow's ``rcos.csv``, ``per_token.parquet``
and ``percentiles.csv`` of tiny-llama on ``mini`` (untied W_E, W_U) and tiny-gpt2 on the
pool ``pooled`` (tied), recomputed from the definitions.

Nothing of layerlaws computes a reference here: bigrams are counted in Python from the
corpus shards' tokens (adjacent text tokens of one sequence), φ_next, φ_pre and φ̃ are
row-normalised dense NumPy arrays, the embedding rows are read from the model's
safetensors, cosines are NumPy float64, R_cos and the per-token correlations are
``scipy.stats.pearsonr``, percentiles ``scipy.stats.rankdata`` (mean ranks, the
percentile of a rank r among n being 100 (r − ½) / n, ``percentileofscore(kind="mean")``)
of the cosines rounded to float32 as the pipeline stores them, and quartiles
``numpy.quantile``. Agreement is to float32 rounding (≈ 1e-7 relative); the largest
difference seen is in each assertion message.
"""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path

import numpy as np
import polars as pl
import pytest
from differences import Differences
from safetensors.numpy import load_file
from scipy import stats
from transformers import AutoTokenizer

pytestmark = pytest.mark.slow

RUNS = [("tiny-llama", "mini", ["mini"]), ("tiny-gpt2", "pooled", ["mini"])]
"""(model, signature corpus, the datasets whose shards make it up) of the tiny workflow."""
TOP_TOKENS = 60
"""``signatures.top_tokens`` of the tiny workflow (conftest.base_config)."""
PAIRS = [
    ("W_E", "next"),
    ("W_U", "pre"),
    ("W_E", "tilde"),
    ("W_U", "tilde"),
    ("W_E", "pre"),
    ("W_U", "next"),
]
"""Every (embedding, signature) pair of rcos.csv; the first four have the per-token and
decile views."""
TOLERANCE = 1e-5
"""Cosines are stored in float32 by the pipeline: a correlation or percentile agrees to
about 1e-7; anything above 1e-5 is a different formula."""


def bigram_counts(shards: list[Path]) -> tuple[Counter, Counter]:
    """Unigram counts of text tokens and bigram counts of adjacent text tokens of one
    sequence (consecutive positions of the same sentence, both not special), counted in
    Python from the shards' ``sentence_id``, ``position``, ``token_id``, ``is_special``."""
    unigrams: Counter = Counter()
    bigrams: Counter = Counter()
    for shard in shards:
        table = pl.read_parquet(
            shard, columns=["sentence_id", "position", "token_id", "is_special"]
        )
        by_place = {(s, p): t for s, p, t, special in table.iter_rows() if not special}
        unigrams.update(by_place.values())
        for (s, p), t in by_place.items():
            if (s, p + 1) in by_place:
                bigrams[(t, by_place[(s, p + 1)])] += 1
    return unigrams, bigrams


def compared_tokens(unigrams: Counter, bigrams: Counter, embeddings: list[np.ndarray]) -> list[int]:
    """The TOP_TOKENS most frequent tokens (ties: smaller id first) with at least one next
    and one previous token, whose embedding rows are not all zero; most frequent first."""
    has_next = {a for a, _ in bigrams}
    has_previous = {b for _, b in bigrams}
    ranked = sorted(
        (t for t in unigrams if t in has_next and t in has_previous),
        key=lambda t: (-unigrams[t], t),
    )[:TOP_TOKENS]
    return [t for t in ranked if all(np.any(matrix[t] != 0) for matrix in embeddings)]


def signatures(bigrams: Counter, tokens: list[int], vocab: int) -> dict[str, np.ndarray]:
    """φ_next[s], φ_pre[s] (rows summing to 1) and φ̃ = φ_next + φ_pre, dense
    (len(tokens), vocab) float64."""
    row = {t: i for i, t in enumerate(tokens)}
    following = np.zeros((len(tokens), vocab))
    preceding = np.zeros((len(tokens), vocab))
    for (a, b), count in bigrams.items():
        if a in row:
            following[row[a], b] += count
        if b in row:
            preceding[row[b], a] += count
    following /= following.sum(axis=1, keepdims=True)
    preceding /= preceding.sum(axis=1, keepdims=True)
    return {"next": following, "pre": preceding, "tilde": following + preceding}


def cosines(rows: np.ndarray) -> np.ndarray:
    """cos(r_i, r_j) of every pair of rows, float64."""
    unit = rows / np.linalg.norm(rows, axis=1, keepdims=True)
    return unit @ unit.T


def embedding_rows(model_folder: Path) -> tuple[np.ndarray, np.ndarray]:
    """W_E and W_U (V, d) float64 straight from the safetensors of the model the run
    prepared (its facts name the folder); W_U is W_E when the file has no LM head."""
    facts = json.loads((model_folder / "layerlaws_model.json").read_text())
    weights: dict[str, np.ndarray] = {}
    for path in sorted(Path(facts["weights"] or model_folder).glob("*.safetensors")):
        weights |= load_file(path)
    input_name = next(n for n in weights if n.endswith(("embed_tokens.weight", "wte.weight")))
    output = weights.get("lm_head.weight", weights[input_name])
    return weights[input_name].astype(np.float64), output.astype(np.float64)


def upper(matrix: np.ndarray) -> np.ndarray:
    """Entries above the diagonal, row by row."""
    return matrix[np.triu_indices(len(matrix), k=1)]


def stored(values: np.ndarray) -> np.ndarray:
    """Cosines as the pipeline stores them (float32, docs/numerics.md):
    ranks are of the stored values, whose rounding merges or splits a few near-ties
    (ranking the float64 cosines moves a decile's mean by up to 3e-4 percentile points)."""
    return values.astype(np.float32)


def percentile(values: np.ndarray) -> np.ndarray:
    """100 (r − ½) / n for the mean rank r of each value among the n values."""
    return 100.0 * (stats.rankdata(values, method="average") - 0.5) / len(values)


@pytest.fixture(scope="module", params=RUNS, ids=[f"{m}-{c}" for m, c, _ in RUNS])
def reference(request, finished):
    """The run's tables and the reference matrices of one (model, corpus)."""
    model, corpus, datasets = request.param
    results = finished / "results"
    shards = [
        shard
        for dataset in datasets
        for shard in sorted((results / "signatures" / model / dataset / "shards").glob("*.parquet"))
    ]
    unigrams, bigrams = bigram_counts(shards)
    w_e, w_u = embedding_rows(results / "models" / model)
    tokens = compared_tokens(unigrams, bigrams, [w_e, w_u])
    matrices = {"W_E": cosines(w_e[tokens]), "W_U": cosines(w_u[tokens])}
    matrices |= {
        name: cosines(rows) for name, rows in signatures(bigrams, tokens, len(w_e)).items()
    }
    folder = results / "signatures" / model / corpus
    facts = json.loads((results / "models" / model / "layerlaws_model.json").read_text())
    tokenizer = AutoTokenizer.from_pretrained(facts["weights"] or results / "models" / model)
    return {
        "tokens": tokens,
        "texts": [tokenizer.decode([token]) for token in tokens],
        "matrices": matrices,
        "rcos": pl.read_csv(folder / "rcos.csv"),
        "per_token": pl.read_parquet(folder / "per_token.parquet"),
        "percentiles": pl.read_csv(folder / "percentiles.csv"),
    }


def rows_of(table: pl.DataFrame, matrix: str, signature: str) -> pl.DataFrame:
    return table.filter((pl.col("matrix") == matrix) & (pl.col("signature") == signature))


def test_r_cos_is_the_pearson_r_of_off_diagonal_cosines(reference):
    """rcos.csv: r_cos = pearsonr(upper(cos(W)), upper(cos(φ))) for all six pairs,
    n_tokens = C."""
    matrices, rcos = reference["matrices"], reference["rcos"]
    assert sorted(rcos.select("matrix", "signature").rows()) == sorted(PAIRS)
    differences = Differences()
    for matrix, signature in PAIRS:
        row = rows_of(rcos, matrix, signature).row(0, named=True)
        expected = stats.pearsonr(upper(matrices[matrix]), upper(matrices[signature])).statistic
        assert row["n_tokens"] == len(reference["tokens"])
        differences.add("r_cos", row["r_cos"], expected)
    print(differences.check("rcos.csv", atol=TOLERANCE))


def test_per_token_rows_are_whole_row_correlations_and_mean_similarities(reference):
    """per_token.parquet (default ``per_token_diagonal: include``, Yao & Xu Fig. 5C): for
    every token s (most frequent first, its text decoded by the model's tokenizer),
    pearsonr(cos(W)_s, cos(φ)_s) over the whole rows and the mean of cos(W)_s, diagonal
    included."""
    matrices, per_token = reference["matrices"], reference["per_token"]
    differences = Differences()
    for matrix, signature in PAIRS[:4]:
        rows = rows_of(per_token, matrix, signature)
        assert rows["token"].to_list() == reference["tokens"]
        assert rows["text"].to_list() == reference["texts"]
        expected = [
            stats.pearsonr(matrices[matrix][i], matrices[signature][i]).statistic
            for i in range(len(reference["tokens"]))
        ]
        differences.add("correlation", rows["correlation"].to_numpy(), expected)
        differences.add(
            "mean_similarity", rows["mean_similarity"].to_numpy(), matrices[matrix].mean(axis=1)
        )
    print(differences.check("per_token", atol=TOLERANCE))


def test_decile_rows_summarise_the_signature_percentiles(reference):
    """percentiles.csv: off-diagonal pairs ranked into percentiles (mean ranks); in each
    decile k = 1…10 of the embedding percentile ((k − 1)·10 ≤ p < k·10), the mean,
    quartiles (numpy's linear interpolation; with 177 pairs a decile, 44 = 0.25 · 176 and
    132 are ranks, so any interpolation gives the same) and count of the signature
    percentile."""
    matrices, table = reference["matrices"], reference["percentiles"]
    differences = Differences()
    for matrix, signature in PAIRS[:4]:
        embedding = percentile(stored(upper(matrices[matrix])))
        signed = percentile(stored(upper(matrices[signature])))
        decile = np.minimum(np.floor(embedding / 10), 9).astype(int) + 1
        rows = rows_of(table, matrix, signature).sort("decile")
        assert rows["decile"].to_list() == sorted(set(decile))
        for row in rows.iter_rows(named=True):
            values = signed[decile == row["decile"]]
            assert row["n_pairs"] == len(values)
            expected = {
                "mean": values.mean(),
                "q25": np.quantile(values, 0.25),
                "median": np.median(values),
                "q75": np.quantile(values, 0.75),
            }
            for column, value in expected.items():
                differences.add(column, row[column], value)
    print(differences.check("percentiles.csv", atol=1e-4))
