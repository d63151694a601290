"""Yao & Xu Fig. 5B–E as the paper ran it: each model trained on its own corpus and compared
with the signatures of the tokens it was trained on (``signatures.own_corpus``), through a
real tiny workflow run of two Qwen2-style trainings, one of them exactly one epoch of its
whole source (as the paper's), the other a token budget of its sample; R_cos
and the pooled decile profile against numpy and scipy computations from the paper's
definitions over bigrams counted here from the packed sequences the trainings read."""

from __future__ import annotations

import copy
import json
import re
from pathlib import Path

import numpy as np
import polars as pl
import pytest
import yaml
from conftest import REPO
from safetensors.numpy import load_file
from scipy import stats
from snakemake.utils import validate
from snakemake_runs import run_ok, write_config

from layerlaws.core.errors import LayerlawsError
from layerlaws.core.settings import SCHEMA_FILE
from layerlaws.pipeline.expansion import ExpandedConfig
from layerlaws.signatures.token_groups import COSINE_SCHEMA
from layerlaws.signatures.workflow import OWN_CORPUS_FIGURES
from layerlaws.training.plan import pack_sequences
from layerlaws.training.train import tokenize_texts
from tests.signatures.test_signatures import DECILE_COLUMNS
from tests.signatures.test_token_groups import (
    assert_next_tokens,
    expected_next_tokens,
    row_cosines,
)

pytestmark = pytest.mark.slow

TRAINING = {
    "architecture": "qwen2",
    "num_layers": 1,
    "hidden_size": 16,
    "num_heads": 2,
    "head_dim": 4,
    "intermediate_size": 32,
    "tie_embeddings": False,
    "init": "normal_fan_in",
    "tokenizer": "tiny-llama",
    "context": 16,
    "batch_size": 4,
    "steps": 6,
    "warmup_steps": 2,
    "checkpoints": 2,
}
"""A one-block Qwen2 with Yao & Xu's initialisation, trained 6 steps (saved at 0 and 6)."""


def absent_word(tokenizer, texts):
    """The first word of the vocabulary (alphabetically) that no text of the first half
    holds."""
    present = {token for text in texts[:40] for token in tokenizer.tokenize(text)}
    return next(
        word for word in sorted(tokenizer.get_vocab()) if word.isalpha() and word not in present
    )


@pytest.fixture(scope="module")
def own_config(llama_folder, texts, tokenizer, tmp_path_factory):
    """Two corpora (halves of the texts), a model trained on each, compared as a group;
    a token group (Yao & Xu Fig. 12) in the first model's run, one of its words absent
    from the first half."""
    folder = tmp_path_factory.mktemp("halves")
    sources = {}
    for name, half in (("first", texts[:40]), ("second", texts[40:])):
        path = folder / f"{name}.jsonl"
        path.write_text("".join(json.dumps({"text": text}) + "\n" for text in half))
        sources[name] = {"source": {"kind": "files", "paths": [str(path)]}, "n_samples": "all"}
    return {
        "models": {"tiny-llama": {"source": {"kind": "local", "path": str(llama_folder)}}},
        "datasets": sources,
        "training": {
            "on-first": {
                **TRAINING,
                "dataset": "first",
                "seed": 0,
                "corpus": "source",
                "epochs": 1,
            },
            "on-second": {**TRAINING, "dataset": "second", "seed": 1, "token_budget": 20 * 16},
        },
        "signatures": {
            "own_corpus": {"halves": ["on-first", "on-second"]},
            "top_tokens": 1000,
            "token_groups": {
                "chosen": {
                    "tokens": ["the", "of", "is", "and", absent_word(tokenizer, texts)],
                    "models": ["on-first"],
                }
            },
        },
        "execution": {"batch_size": 8, "lock_dir": str(tmp_path_factory.mktemp("locks"))},
    }


@pytest.fixture(scope="module")
def own_run(own_config, tmp_path_factory):
    workdir = tmp_path_factory.mktemp("own_corpus")
    write_config(workdir, own_config)
    run_ok(workdir)
    return workdir


def embeddings(workdir, training):
    """W_E and W_U (V, d) float64 of a training's final checkpoint, read from its weights."""
    weights = load_file(
        workdir / f"results/training/{training}/checkpoints/step_000006/model.safetensors"
    )
    return weights["model.embed_tokens.weight"].astype(np.float64), weights[
        "lm_head.weight"
    ].astype(np.float64)


def separator(tokenizer):
    """The token between packed texts: EOS, else BOS (the tiny tokenizer has no EOS)."""
    return tokenizer.bos_token_id if tokenizer.eos_token_id is None else tokenizer.eos_token_id


def trained_counts(workdir, corpus, size, eos):
    """(unigram counts (V,), bigram counts (V, V)) of the packed sequences the training on
    ``corpus`` read: text tokens (not the EOS between texts) and pairs of text tokens side
    by side within one sequence (texts are joined by ``eos``, the separator)."""
    sequences = np.load(workdir / f"results/training/on-{corpus}/sequences.npy")
    text = sequences != eos
    unigrams = np.bincount(sequences[text], minlength=size)
    pairs = text[:, :-1] & text[:, 1:]
    bigrams = np.zeros((size, size))
    np.add.at(bigrams, (sequences[:, :-1][pairs], sequences[:, 1:][pairs]), 1)
    return unigrams, bigrams


def reference_cosines(workdir, corpus, w_e, w_u, top, eos):
    """cos(W_E), cos(W_U), cos(φ_next), cos(φ_pre) over the ``top`` most frequent tokens
    with a successor and a predecessor (Yao & Xu §6), from the trained tokens' counts."""
    unigrams, counts = trained_counts(workdir, corpus, len(w_e), eos)
    eligible = (counts.sum(1) > 0) & (counts.sum(0) > 0)
    ranked = np.lexsort((np.arange(len(unigrams)), -unigrams))
    tokens = np.array([t for t in ranked if eligible[t]][:top])
    following = counts[tokens] / counts[tokens].sum(1, keepdims=True)
    preceding = counts[:, tokens].T / counts[:, tokens].sum(0)[:, None]

    def cos(rows):
        unit = rows / np.linalg.norm(rows, axis=1, keepdims=True)
        return unit @ unit.T

    return {
        ("W_E", "next"): (cos(w_e[tokens]), cos(following)),
        ("W_U", "pre"): (cos(w_u[tokens]), cos(preceding)),
    }


def off_diagonal(matrix):
    """The pairs s < s' of a symmetric similarity matrix."""
    return matrix[np.triu_indices(len(matrix), k=1)]


def test_each_model_is_compared_with_its_own_corpus(own_run, tokenizer):
    folder = own_run / "results/signatures/own_corpus/halves"
    table = pl.read_csv(folder / "rcos_by_dataset.csv")
    assert table.columns == ["model", "corpus", "matrix", "signature", "r_cos", "n_tokens"]
    assert table.select("model", "corpus").unique(maintain_order=True).rows() == [
        ("on-first@step6", "first"),
        ("on-second@step6", "second"),
    ]
    for corpus in ("first", "second"):
        w_e, w_u = embeddings(own_run, f"on-{corpus}")
        other = embeddings(own_run, "on-second" if corpus == "first" else "on-first")
        for pair, (embedding, signature) in reference_cosines(
            own_run, corpus, w_e, w_u, 1000, separator(tokenizer)
        ).items():
            expected = np.corrcoef(off_diagonal(embedding), off_diagonal(signature))[0, 1]
            row = table.filter(
                (pl.col("corpus") == corpus)
                & (pl.col("matrix") == pair[0])
                & (pl.col("signature") == pair[1])
            )
            assert row["r_cos"].item() == pytest.approx(expected, abs=1e-5), (corpus, pair)
            assert row["n_tokens"].item() == len(embedding)
        # The other model's embeddings give another R_cos: the pairing matters.
        crossed = reference_cosines(own_run, corpus, *other, 1000, separator(tokenizer))[
            ("W_E", "next")
        ]
        crossed_rcos = np.corrcoef(off_diagonal(crossed[0]), off_diagonal(crossed[1]))[0, 1]
        mine = table.filter(
            (pl.col("corpus") == corpus)
            & (pl.col("matrix") == "W_E")
            & (pl.col("signature") == "next")
        )
        assert abs(mine["r_cos"].item() - crossed_rcos) > 1e-4
    for name in OWN_CORPUS_FIGURES:
        assert (folder / f"{name}.svg").stat().st_size > 1000


def test_one_epoch_reads_the_whole_source_once_and_a_budget_its_sequences(
    own_run, own_config, tokenizer
):
    """on-first (corpus: source, epochs: 1): its corpus is every text of its file packed
    (streamed through the tokenizer to disk), and its last checkpoint has read each of
    those sequences once; on-second (token_budget: 320 tokens, no epochs): its corpus is
    the first 20 sequences of its packed sample."""
    eos = separator(tokenizer)
    source = own_config["datasets"]["first"]["source"]["paths"][0]
    lines = Path(source).read_text(encoding="utf-8").splitlines()
    texts = [json.loads(line)["text"] for line in lines]
    first = np.load(own_run / "results/training/on-first/sequences.npy")
    packed = pack_sequences(tokenize_texts(tokenizer, texts), eos, 16)
    np.testing.assert_array_equal(first, packed)
    facts = json.loads((own_run / "results/training/on-first/corpus.json").read_text())
    assert (facts["texts"], facts["sequences"], facts["corpus_tokens"]) == (
        40,
        len(first),
        first.size,
    )
    checkpoints = pl.read_csv(own_run / "results/training/on-first/checkpoints.csv")
    # Saved at steps 0, 1 and 6: step 1 read ⌊n / 6⌋ of the n sequences, step 6 all.
    assert checkpoints["tokens_seen"].to_list() == [0, len(first) // 6 * 16, first.size]
    sample = pl.read_parquet(own_run / "results/corpus/second/sentences.parquet")["text"]
    second = np.load(own_run / "results/training/on-second/sequences.npy")
    whole = pack_sequences(tokenize_texts(tokenizer, sample.to_list()), eos, 16)
    assert len(whole) > 20
    np.testing.assert_array_equal(second, whole[:20])
    for corpus, sequences in (("first", first), ("second", second)):
        folder = own_run / f"results/training/on-{corpus}/counts"
        size = int(sequences.max()) + 1
        unigrams, bigrams = trained_counts(own_run, corpus, size, separator(tokenizer))
        assert unigrams.sum() > 0
        counted = pl.read_parquet(folder / "unigrams.parquet")
        mine = np.zeros(size)
        np.add.at(mine, counted["token"].to_numpy(), counted["count"].to_numpy())
        np.testing.assert_array_equal(mine, unigrams)
        counted = pl.read_parquet(folder / "bigrams.parquet")
        mine = np.zeros((size, size))
        np.add.at(
            mine,
            (counted["token"].to_numpy(), counted["next_token"].to_numpy()),
            counted["count"].to_numpy(),
        )
        np.testing.assert_array_equal(mine, bigrams)


def test_pooled_deciles_rank_within_each_corpus_and_pool_the_pairs(own_run, tokenizer):
    """Yao & Xu, Appendix C.1: percentiles of each corpus's own similarity pairs, pairs
    of both corpora concatenated, the mean signature percentile per embedding decile and
    its median (from the corpora's histograms: within a percentile point, and the float32
    cosines' rounding)."""
    embedding_percentiles, signature_percentiles = [], []
    for corpus in ("first", "second"):
        w_e, w_u = embeddings(own_run, f"on-{corpus}")
        embedding, signature = reference_cosines(
            own_run, corpus, w_e, w_u, 1000, separator(tokenizer)
        )[("W_E", "next")]
        for matrix, into in (
            (embedding, embedding_percentiles),
            (signature, signature_percentiles),
        ):
            pairs = off_diagonal(matrix)
            into.append((stats.rankdata(pairs) - 0.5) * 100 / len(pairs))
    embedding_p = np.concatenate(embedding_percentiles)
    signature_p = np.concatenate(signature_percentiles)
    decile = np.minimum(np.floor(embedding_p / 10), 9) + 1
    expected = [signature_p[decile == k].mean() for k in range(1, 11)]
    pooled = pl.read_csv(own_run / "results/signatures/own_corpus/halves/pooled_deciles.csv")
    assert pooled.columns == DECILE_COLUMNS
    mine = pooled.filter((pl.col("matrix") == "W_E") & (pl.col("signature") == "next")).sort(
        "decile"
    )
    assert mine["decile"].to_list() == list(range(1, 11))
    assert mine["n_pairs"].to_list() == [int((decile == k).sum()) for k in range(1, 11)]
    np.testing.assert_allclose(mine["mean"].to_numpy(), expected, rtol=0, atol=0.05)
    medians = [np.median(signature_p[decile == k]) for k in range(1, 11)]
    np.testing.assert_allclose(mine["median"].to_numpy(), medians, rtol=0, atol=1.1)
    # Fig. 11: each decile's histogram of the pooled pairs, one percentile point a bin.
    histograms = np.zeros((10, 100))
    np.add.at(histograms, (decile.astype(int) - 1, np.minimum(signature_p // 1, 99).astype(int)), 1)
    bins = pl.read_csv(own_run / "results/signatures/own_corpus/halves/pooled_percentile_bins.csv")
    assert bins.columns == ["matrix", "signature", "decile", "bin", "n_pairs"]
    mine = bins.filter((pl.col("matrix") == "W_E") & (pl.col("signature") == "next"))
    drawn = np.zeros((10, 100))
    drawn[mine["decile"].to_numpy() - 1, mine["bin"].to_numpy()] = mine["n_pairs"].to_numpy()
    np.testing.assert_array_equal(drawn.sum(axis=1), histograms.sum(axis=1))
    # The pipeline's float32 cosines break near-ties that the float64 reference keeps (and
    # the reverse), moving pairs by about a percentile point: the decile's distribution
    # functions agree within 2 % of its pairs (Kolmogorov–Smirnov distance).
    distance = np.abs(np.cumsum(drawn, axis=1) - np.cumsum(histograms, axis=1)).max(axis=1)
    assert np.all(distance <= 0.02 * histograms.sum(axis=1)), distance / histograms.sum(axis=1)


def test_a_token_group_compares_its_tokens_in_its_models_runs(own_run, own_config, tokenizer):
    """Yao & Xu Fig. 12: cos(W_E) and cos(φ_next) of the group's tokens in on-first's run
    on its own corpus, against NumPy from its weights and the sequences it read (the
    absent word's φ_next row and column NaN); its most frequent next tokens; no group in
    on-second's run, which the group does not name."""
    words = own_config["signatures"]["token_groups"]["chosen"]["tokens"]
    tokens = np.array([tokenizer.get_vocab()[word] for word in words])
    w_e, _ = embeddings(own_run, "on-first")
    _, counts = trained_counts(own_run, "first", len(w_e), separator(tokenizer))
    assert counts[tokens[-1]].sum() == 0 and (counts[tokens[:-1]].sum(axis=1) > 0).all()
    with np.errstate(invalid="ignore"):
        phi_next = counts[tokens] / counts[tokens].sum(axis=1, keepdims=True)
    folder = own_run / "results/signatures/on-first@step6/first/token_groups/chosen"
    cosines = pl.read_csv(folder / "cosines.csv", schema=COSINE_SCHEMA)
    n = len(words)
    for matrix, rows in (("W_E", w_e[tokens]), ("next", phi_next)):
        block = cosines.filter(pl.col("matrix") == matrix)
        assert block["row_text"].to_list() == [word for word in words for _ in words]
        np.testing.assert_allclose(
            block["cosine"].to_numpy().reshape(n, n), row_cosines(rows), atol=1e-12
        )
    listed = pl.read_csv(
        folder / "next_tokens.csv", schema_overrides={"text": pl.String, "next_text": pl.String}
    )
    expected = expected_next_tokens(
        counts, tokens, words, lambda token: tokenizer.decode([token]), 5
    )
    assert_next_tokens(listed, expected)
    assert (folder / "heatmaps.svg").stat().st_size > 1000
    assert not (own_run / "results/signatures/on-second@step6/second/token_groups").exists()


@pytest.fixture
def validated(own_config):
    config = copy.deepcopy(own_config)
    validate(config, str(SCHEMA_FILE))
    return config


@pytest.mark.parametrize(
    ("change", "message"),
    [
        (
            lambda config: config["signatures"]["own_corpus"]["halves"].append("on-third"),
            "config signatures.own_corpus.halves is 'on-third', which is not a key of training",
        ),
        (
            lambda config: config["training"]["on-first"].update(checkpoints=[0, 3]),
            "training.on-first.checkpoints does not save step 6",
        ),
        (
            lambda config: config["signatures"]["token_groups"]["chosen"].update(
                models=["on-first", "tiny-llama"]
            ),
            "config signatures.token_groups.chosen.models names 'tiny-llama', which has no "
            "signature run",
        ),
    ],
)
def test_own_corpus_bad_input(validated, change, message):
    change(validated)
    with pytest.raises(LayerlawsError, match=re.escape(message)):
        ExpandedConfig.from_config(validated)


def test_the_own_corpus_group_adds_the_final_checkpoints_signature_runs(validated):
    expanded = ExpandedConfig.from_config(validated)
    assert expanded.own_corpus["halves"] == (
        ("on-first@step6", "first"),
        ("on-second@step6", "second"),
    )
    assert set(expanded.own_corpus["halves"]) <= set(expanded.signature_runs)
    config = yaml.safe_load((REPO / "config.yaml").read_text())
    validate(config, str(SCHEMA_FILE))
    assert ExpandedConfig.from_config(config).own_corpus == {}
