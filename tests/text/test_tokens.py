"""Token tables: truncation, schema, BOS and padding for left- and right-padding tokenizers."""

import itertools

import numpy as np
import polars as pl
import pytest

from layerlaws.core.errors import LayerlawsError
from layerlaws.models.loading import load_tokenizer
from layerlaws.text import tokens as tokens_module
from layerlaws.text.tokens import (
    TOKEN_SCHEMA,
    packed_token_shards,
    tokenize_corpus,
    tokenize_prompts,
    tokenize_sentences,
)


def sentences(texts):
    return pl.DataFrame(
        {"sentence_id": list(range(len(texts))), "text": texts, "source": ["test"] * len(texts)}
    )


@pytest.mark.parametrize("family", ["llama", "gpt2"])
def test_schema_truncation_and_special_tokens(family, llama_folder, gpt2_folder, texts):
    tokenizer = load_tokenizer(llama_folder if family == "llama" else gpt2_folder)
    table = tokenize_sentences(sentences(texts[:10]), tokenizer, max_tokens=16)
    assert dict(table.schema) == TOKEN_SCHEMA
    lengths = table.group_by("sentence_id").len()["len"]
    assert lengths.max() == 16
    specials = table.filter(pl.col("is_special"))
    if family == "llama":  # the tokenizer adds BOS: flagged special, at position 0
        assert specials["position"].to_list() == [0] * 10
        assert set(specials["token_id"]) == {tokenizer.bos_token_id}
    else:  # it adds nothing
        assert specials.is_empty()
    assert tokenizer.pad_token_id not in table.filter(~pl.col("is_special"))["token_id"]
    for _, part in table.group_by("sentence_id"):
        assert sorted(part["position"]) == list(range(len(part)))


def test_too_short_texts_are_dropped_or_rejected(llama_folder, texts):
    tokenizer = load_tokenizer(llama_folder)
    mixed = sentences(["Hi", texts[0], "A"])
    table = tokenize_sentences(mixed, tokenizer, max_tokens=32, min_tokens=3)
    assert table["sentence_id"].unique().to_list() == [1]
    with pytest.raises(LayerlawsError, match="fewer than min_tokens=3 text tokens; raise max"):
        tokenize_sentences(sentences(["Hi", "A b"]), tokenizer, max_tokens=32, min_tokens=3)


def test_a_max_tokens_that_leaves_too_few_text_tokens_is_named(llama_folder, texts):
    """max_tokens counts the BOS: 2 leaves one text token, fewer than min_tokens=2; the
    setting to raise is max_tokens, not the texts' length."""
    tokenizer = load_tokenizer(llama_folder)
    with pytest.raises(LayerlawsError, match=r"max_tokens=2 \(special tokens counted\) cut 3 of"):
        tokenize_sentences(sentences(texts[:3]), tokenizer, max_tokens=2, min_tokens=2)


def test_token_budget_keeps_texts_in_order(llama_folder, texts):
    tokenizer = load_tokenizer(llama_folder)
    table = tokenize_sentences(sentences(texts[:20]), tokenizer, max_tokens=20, token_budget=50)
    kept = table["sentence_id"].unique(maintain_order=True).to_list()
    assert kept == list(range(len(kept)))
    text_tokens = table.filter(~pl.col("is_special")).height
    assert 50 <= text_tokens < 50 + 20


def test_corpus_shards_have_running_ids_a_budget_and_no_empty_corpus(llama_folder, texts, tmp_path):
    tokenizer = load_tokenizer(llama_folder)
    corpus = [(text, f"t:{i}") for i, text in enumerate(texts[:25])]
    counts = tokenize_corpus(corpus, tokenizer, tmp_path / "all", shard_texts=10)
    shards = sorted((tmp_path / "all").glob("shard_*.parquet"))
    assert counts == {"n_texts": 25, "n_text_tokens": counts["n_text_tokens"], "n_shards": 3}
    table = pl.concat([pl.read_parquet(shard) for shard in shards])
    assert table["sentence_id"].unique().sort().to_list() == list(range(25))
    assert table.filter(~pl.col("is_special")).height == counts["n_text_tokens"]
    budget = tokenize_corpus(
        corpus, tokenizer, tmp_path / "budget", shard_texts=10, token_budget=50
    )
    assert 50 <= budget["n_text_tokens"] < counts["n_text_tokens"]
    with pytest.raises(LayerlawsError, match="signature corpus is empty"):
        tokenize_corpus([], tokenizer, tmp_path / "empty", shard_texts=10)


LONG_TEXT = "the function of a set is the number of its elements " * 4


def test_too_long_texts_and_prompts_follow_one_policy(llama_folder, texts):
    """truncate keeps BOS and cuts the end; drop leaves the text out; error names it."""
    tokenizer = load_tokenizer(llama_folder)
    table = sentences([LONG_TEXT, texts[0][:20]])
    truncated = tokenize_sentences(table, tokenizer, max_tokens=8, too_long="truncate")
    assert truncated.group_by("sentence_id").len().sort("sentence_id")["len"][0] == 8
    assert truncated.filter(pl.col("is_special"))["position"].to_list() == [0, 0]
    assert tokenize_prompts([LONG_TEXT], tokenizer, 8, "truncate") == (
        [truncated.filter(pl.col("sentence_id") == 0)["token_id"].to_list()],
        [0],
    )
    short = len(tokenizer(texts[0][:20])["input_ids"])
    dropped = tokenize_sentences(table, tokenizer, max_tokens=short, too_long="drop")
    assert dropped["sentence_id"].unique().to_list() == [1]
    assert tokenize_prompts([LONG_TEXT, texts[0][:20]], tokenizer, short, "drop") == (
        [dropped["token_id"].to_list()],
        [1],
    )
    for tokenize in (
        lambda: tokenize_sentences(table, tokenizer, max_tokens=8, too_long="error"),
        lambda: tokenize_prompts([LONG_TEXT], tokenizer, 8, "error"),
    ):
        with pytest.raises(LayerlawsError, match="more than max_tokens=8 tokens"):
            tokenize()


def test_the_limit_is_capped_at_the_model_context(llama_folder, caplog):
    tokenizer = load_tokenizer(llama_folder)
    long_text = LONG_TEXT * 4
    table = tokenize_sentences(sentences([long_text]), tokenizer, 512, max_positions=20)
    assert len(table) == 20
    assert "exceeds the model's context of 20 tokens" in caplog.text
    assert len(tokenize_prompts([long_text], tokenizer, 512, "truncate", 20)[0][0]) == 20
    with pytest.raises(LayerlawsError, match="fewer than 2 tokens"):
        tokenize_prompts([""], tokenizer, 8)


def test_packed_sequences_become_shards_whose_bigrams_stay_within_texts(tmp_path):
    """Three packed sequences of 5 tokens, texts joined by the separator 0, in shards of
    two sequences: text tokens counted, separators special, and a successor only where two
    text tokens stand side by side in one sequence (counted here by hand)."""
    sequences = np.array([[5, 6, 0, 7, 8], [9, 0, 5, 6, 6], [7, 7, 7, 0, 9]])
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(tokens_module, "PACKED_SHARD_TOKENS", 10)
        counts = packed_token_shards(sequences, 0, tmp_path)
    assert counts == {"n_sequences": 3, "n_text_tokens": 12, "n_shards": 2}
    table = pl.concat(pl.read_parquet(path) for path in sorted(tmp_path.glob("shard_*")))
    assert table["sentence_id"].to_list() == [0] * 5 + [1] * 5 + [2] * 5
    assert table["is_special"].to_list() == [token == 0 for token in sequences.ravel()]
    pairs = [
        (first, second)
        for row in sequences
        for first, second in itertools.pairwise(row)
        if first and second
    ]
    found = table.filter(pl.col("next_token_id").is_not_null()).select("token_id", "next_token_id")
    assert sorted(found.rows()) == sorted(pairs) and len(pairs) == 6
    with pytest.raises(LayerlawsError, match="no packed sequence"):
        packed_token_shards(sequences[:0], 0, tmp_path / "empty")
