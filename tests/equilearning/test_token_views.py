"""Token views: the kept rows are the chosen words' states at the chosen layers, and their
coordinates are the group's first two principal components (against numpy's eigh)."""

import numpy as np
import polars as pl
import pytest
from lstsq_reference import normalized

from layerlaws.core.geometry import principal_plane
from layerlaws.equilearning.token_views import (
    TokenViews,
    ViewedRows,
    default_layers,
    word_token_ids,
)
from layerlaws.forward.kept_states import HiddenStates
from layerlaws.forward.kept_writer import HiddenStateWriter
from layerlaws.forward.model_pass import run_forward_pass, text_rows
from layerlaws.models.loading import load_model, load_tokenizer
from layerlaws.models.preparation import prepare_model
from layerlaws.text.tokens import tokenize_sentences

GROUPS = [["is", "are"], ["the", "of"], ["notaword"]]
NORMS = ["model", "standardize", "none"]


@pytest.fixture(scope="module")
def viewed(llama_folder, texts, tmp_path_factory):
    root = tmp_path_factory.mktemp("views")
    facts = prepare_model({"source": {"kind": "local", "path": str(llama_folder)}}, root / "m")
    sentences = pl.DataFrame(
        {"sentence_id": list(range(40)), "text": texts[:40], "source": ["t"] * 40}
    )
    tokenizer = load_tokenizer(root / "m")
    tokens = tokenize_sentences(sentences, tokenizer, max_tokens=24)
    word_ids = word_token_ids(GROUPS, tokenizer)
    rows = ViewedRows.choose(tokens, word_ids, max_rows=7)
    views = {norm: TokenViews(facts, rows, [0, 2, 4], norm) for norm in NORMS}
    writer = HiddenStateWriter(root / "h", facts, text_rows(tokens), "float32", 100)
    model = load_model(root / "m", "float32", "cpu")
    observers = [*views.values(), writer]
    report = run_forward_pass(model, facts, tokens, observers, 5, "cpu", progress=False)
    writer.finish(report)
    return facts, tokenizer, word_ids, rows, views, HiddenStates.open(root / "h")


def test_words_resolve_to_single_tokens_and_unknown_ones_are_left_out(viewed):
    _, tokenizer, word_ids, _, _, _ = viewed
    assert set(word_ids) == {"is", "are", "the", "of"}
    assert word_ids["the"] == [tokenizer.convert_tokens_to_ids("the")]
    assert default_layers(30) == [8, 15, 22, 30] and default_layers(2) == [1, 2]


def test_first_rows_of_each_word_are_kept(viewed):
    _, _, word_ids, rows, _, hidden = viewed
    table = rows.table
    assert table.group_by("word").len()["len"].max() == 7
    for word, ids in word_ids.items():
        all_rows = np.flatnonzero(np.isin(hidden.rows["token_id"].to_numpy(), ids))
        chosen = table.filter(pl.col("word") == word)["row"].to_numpy()
        np.testing.assert_array_equal(chosen, all_rows[:7])


@pytest.mark.parametrize("norm", NORMS)
def test_kept_states_are_the_normalised_hidden_states(viewed, norm):
    """``equilearning.token_views.norm``: the states of layers below L under each norm
    (torch's functional norms and NumPy's standardisation, ``tests/lstsq_reference.py``),
    layer L's as the LM head reads them."""
    facts, _, _, rows, views, hidden = viewed
    arrays = views[norm].arrays()
    for layer in (0, 2, 4):
        states = hidden.layer(layer)[rows.table["row"].to_numpy()].astype(np.float64)
        if layer < facts.num_layers:
            states = normalized(states, norm, facts.norm_type, facts.norm_eps)
        np.testing.assert_allclose(arrays[f"layer_{layer}"], states, atol=1e-5)


def test_coordinates_are_the_groups_principal_components(viewed):
    _, _, _, rows, views, _ = viewed
    table = views["model"].table(GROUPS)
    assert table.columns == [
        "group",
        "word",
        "token_id",
        "layer",
        "sentence_id",
        "position",
        "pc1",
        "pc2",
    ]
    assert set(table["group"]) == {"is/are", "the/of"}
    arrays = views["model"].arrays()
    members = rows.table.with_row_index("index").filter(pl.col("word").is_in(["the", "of"]))
    points = arrays["layer_2"][members["index"].to_numpy()].astype(np.float64)
    centred = points - points.mean(axis=0)
    _, vectors = np.linalg.eigh(centred.T @ centred)
    expected = centred @ vectors[:, ::-1][:, :2]
    block = table.filter((pl.col("group") == "the/of") & (pl.col("layer") == 2))
    for column, component in zip(("pc1", "pc2"), expected.T, strict=True):
        np.testing.assert_allclose(np.abs(block[column].to_numpy()), np.abs(component), atol=1e-6)


def test_principal_plane_pads_a_missing_component():
    points = np.outer(np.arange(5.0), np.ones(3))
    projected = principal_plane(points)
    assert projected.shape == (5, 2)
    assert np.abs(projected[:, 1]).max() < 1e-9
