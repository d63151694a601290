"""The observer interface (``layerlaws.forward.observers``): the worked example of
docs/observers.md, saved in a temporary folder as a user's module, run by the API on a tiny
Llama against its own reference (the mean of |x|^power of the text tokens' states, from
the model's hidden states of each text alone); the built-in geometry through the API
against a GeometryObserver run on the same tokens; the declared costs; and the one-line
error of every bad class name."""

import logging

import numpy as np
import polars as pl
import pytest
import torch
from observer_example import EXAMPLE, write_example

from layerlaws import api
from layerlaws.core.errors import LayerlawsError
from layerlaws.core.settings import schema_at
from layerlaws.equilearning.settings import BUILT_IN_OBSERVERS
from layerlaws.forward.model_pass import run_forward_pass
from layerlaws.forward.observers import ObserverSpec, load_observer_class
from layerlaws.geometry.observer import GeometryObserver
from layerlaws.geometry.settings import GeometrySettings
from layerlaws.models.facts import model_facts
from layerlaws.models.loading import load_model, load_tokenizer
from layerlaws.text.tokens import tokenize_sentences

TEXTS = 24
MAX_TOKENS = 24
KEY = "equilearning.observers[0]"


@pytest.fixture(scope="module")
def in_memory(llama_folder, texts):
    """The tiny Llama, its tokenizer, 24 texts and their tokens as the API makes them."""
    model = load_model(llama_folder, "float32", "cpu")
    tokenizer = load_tokenizer(llama_folder)
    sentences = pl.DataFrame(
        {"sentence_id": range(TEXTS), "text": texts[:TEXTS], "source": "api"},
        schema={"sentence_id": pl.Int64, "text": pl.String, "source": pl.String},
    )
    tokens = tokenize_sentences(sentences, tokenizer, MAX_TOKENS, min_tokens=1)
    return model, tokenizer, texts[:TEXTS], tokens


def mean_norm_reference(model, tokens, power: float) -> tuple[np.ndarray, np.ndarray]:
    """(rows, mean |x|^power) of every layer over the text tokens, each text run alone."""
    sums, rows = 0.0, 0
    for _, part in tokens.group_by("sentence_id", maintain_order=True):
        ids = torch.tensor(part["token_id"].to_list())[None]
        with torch.no_grad():
            states = torch.stack(model(ids, output_hidden_states=True).hidden_states)[:, 0]
        text = states[:, ~torch.from_numpy(part["is_special"].to_numpy())].double().numpy()
        sums = sums + (np.linalg.norm(text, axis=2) ** power).sum(axis=1)
        rows += text.shape[1]
    return np.full(len(sums), rows), sums / rows


def test_the_docs_example_and_geometry_through_the_api(in_memory, tmp_path, monkeypatch):
    """One pass, three named observers: the example by its path (relative to the working
    directory) with power 2, by its class with the default power 1, and the built-in
    geometry; each equal to its reference."""
    model, tokenizer, texts, tokens = in_memory
    write_example(tmp_path / "user")
    monkeypatch.chdir(tmp_path / "user")
    mean_norm = load_observer_class(f"{EXAMPLE}:MeanNorm", "test")
    observers = [
        api.ObserverSpec("squared", f"{EXAMPLE}:MeanNorm", {"power": 2}),
        api.ObserverSpec("plain", mean_norm),
        "geometry",
    ]
    probing = api.Texts(texts, max_tokens=MAX_TOKENS, min_tokens=1)
    law = api.equilearning_law(model, tokenizer, probing, batch_size=8, observers=observers)
    assert list(law.observers) == ["squared", "plain", "geometry"]
    for name, power in (("squared", 2), ("plain", 1)):
        table = law.observers[name]
        rows, mean = mean_norm_reference(model, tokens, power)
        assert table["layer"].to_list() == list(range(5))
        assert table["n_rows"].to_list() == rows.tolist() and rows[0] > 0
        np.testing.assert_allclose(table["mean"].to_numpy(), mean, rtol=1e-5)
    geometry = GeometryObserver(GeometrySettings(), 4)
    facts = model_facts(model, {"kind": "memory"})
    run_forward_pass(model, facts, tokens, [geometry], 8, "cpu", progress=False)
    expected = geometry.table()
    assert law.observers["geometry"].columns == expected.columns
    assert np.isfinite(expected["effective_rank"].to_numpy()).all()
    for column in expected.columns:
        np.testing.assert_allclose(
            law.observers["geometry"][column].to_numpy(), expected[column].to_numpy(), rtol=1e-9
        )


def test_declared_costs_are_read_and_missing_ones_logged(tmp_path, monkeypatch, caplog):
    """The example's costs as it declares them; an observer declaring none costs nothing,
    and the log says its memory and time are not planned."""
    write_example(tmp_path)
    monkeypatch.chdir(tmp_path)
    sizes = {"hidden_size": 64, "num_layers": 8, "batch_tokens": 1000, "dtype_bytes": 2}
    spec = ObserverSpec("mean_norm", f"{EXAMPLE}:MeanNorm", {}, KEY)
    assert spec.needs(**sizes, tokens_per_text=100) == (8 * 1000 * 64, 3.0 * 64 * 9)
    (tmp_path / "bare.py").write_text(
        (tmp_path / EXAMPLE).read_text().split("    @staticmethod")[0]
    )
    bare = ObserverSpec("bare", "bare.py:MeanNorm", {}, KEY)
    with caplog.at_level(logging.INFO, logger="layerlaws.forward.observers"):
        assert bare.needs(**sizes, tokens_per_text=100) == (0, 0.0)
    assert "observer bare declares no bytes_on_device: its memory is not planned" in caplog.text
    assert "observer bare declares no flops_per_token: its time is not planned" in caplog.text


def test_the_schema_names_the_built_in_observers():
    (names, _) = schema_at("equilearning.observers")["items"]["oneOf"]
    assert names["enum"] == list(BUILT_IN_OBSERVERS)


BROKEN = "class Broken:\n    progress_attributes = ()\n    def observe(self, layer, states): ...\n"


@pytest.mark.parametrize(
    ("source", "message"),
    [
        ("MeanNorm", f"{KEY}.class is 'MeanNorm'; name a class as 'package.module:Class'"),
        ("nowhere/mine.py:Mine", f"{KEY}.class: no file nowhere/mine.py (a path is read from"),
        ("no_such_package_xyz.stats:Mine", f"{KEY}.class: no module 'no_such_package_xyz.stats'"),
        (f"{EXAMPLE}:Missing", f"{KEY}.class: {EXAMPLE} defines no class 'Missing'"),
        ("broken.py:Broken", f"{KEY}.class: Broken lacks begin_batch, merge_, table of an obs"),
        ("failing.py:Mine", f"{KEY}.class: importing failing.py failed: division by zero"),
    ],
)
def test_a_bad_class_name_is_one_line_naming_the_key(source, message, tmp_path, monkeypatch):
    write_example(tmp_path)
    (tmp_path / "broken.py").write_text(BROKEN)
    (tmp_path / "failing.py").write_text("ratio = 1 / 0\n")
    monkeypatch.chdir(tmp_path)
    with pytest.raises(LayerlawsError) as error:
        ObserverSpec("mine", source, {}, KEY).build(num_layers=4)
    assert message in str(error.value) and "\n" not in str(error.value), str(error.value)
