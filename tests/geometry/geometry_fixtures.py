"""The geometry tests' fixtures, as plain functions: the tiny Llama's tokens and its passes
(helpers in geometry_passes.py). Each test module makes fixtures of those it uses
(``module_fixture``); not a conftest.py, since the suite's tests import the top-level
tests/conftest.py by its name."""

import polars as pl
import torch
from geometry_passes import EXACT, OTHER, PAPERS, TEXTS, passed

from layerlaws.models.loading import load_tokenizer
from layerlaws.models.preparation import prepare_model
from layerlaws.text.tokens import tokenize_sentences


def tiny(llama_folder, texts, tmp_path_factory):
    """The tiny Llama's folder, facts and the tokens of 24 texts (≤ 24 tokens each)."""
    folder = tmp_path_factory.mktemp("geometry") / "m"
    facts = prepare_model({"source": {"kind": "local", "path": str(llama_folder)}}, folder)
    sentences = pl.DataFrame(
        {"sentence_id": list(range(TEXTS)), "text": texts[:TEXTS], "source": ["t"] * TEXTS}
    )
    tokens = tokenize_sentences(sentences, load_tokenizer(folder), max_tokens=24)
    return folder, facts, tokens


def float32_pass(tiny):
    """Observers of the papers' choices (float32 and float64 products) and of the other
    choices, and a Keeper, after one float32 pass (the observers convert; the references
    read the same float32 states)."""
    observers, keeper, _ = passed(tiny, torch.float32, (PAPERS, OTHER, EXACT))
    return observers, keeper


def one_job(tiny):
    """The papers' observer (float64 products) after a float64 pass (a text's states then
    do not depend on its batch)."""
    (observer,), _, _ = passed(tiny, torch.float64, (EXACT,))
    return observer
