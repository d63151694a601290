"""Separation fuzziness streamed in batches against a direct float64 computation from
the rows (numpy), on synthetic classes and through a model pass."""

from __future__ import annotations

import numpy as np
import polars as pl
import pytest
import torch

from layerlaws.core.errors import LayerlawsError
from layerlaws.equilearning.fuzziness import SeparationFuzziness, fuzziness, fuzziness_classes
from layerlaws.equilearning.regression import Moments
from layerlaws.equilearning.statistics import normalized, target_ids
from layerlaws.forward.kept_states import HiddenStates
from layerlaws.forward.kept_writer import HiddenStateWriter
from layerlaws.forward.model_pass import run_forward_pass, text_rows
from layerlaws.models.loading import load_model, load_tokenizer
from layerlaws.models.preparation import prepare_model
from layerlaws.text.tokens import tokenize_sentences


def direct_fuzziness(rows: np.ndarray, labels: np.ndarray) -> float:
    """Tr(SS_w SS_b⁺) straight from the definition, float64."""
    mean = rows.mean(axis=0)
    within = np.zeros((rows.shape[1],) * 2)
    between = np.zeros_like(within)
    for label in np.unique(labels):
        members = rows[labels == label]
        centre = members.mean(axis=0)
        within += (members - centre).T @ (members - centre)
        between += len(members) * np.outer(centre - mean, centre - mean)
    n = len(rows)
    return float(np.trace(within / n @ np.linalg.pinv(between / n, rcond=1e-12, hermitian=True)))


def streamed(rows: np.ndarray, labels: np.ndarray, n_classes: int, chunk: int) -> float:
    total = Moments.empty(rows.shape[1])
    sums = torch.zeros(n_classes, rows.shape[1], dtype=torch.float64)
    counts = torch.zeros(n_classes, dtype=torch.long)
    for start in range(0, len(rows), chunk):
        part = torch.from_numpy(rows[start : start + chunk])
        index = torch.from_numpy(labels[start : start + chunk])
        total.merge_(Moments.of_rows(part))
        sums.index_add_(0, index, part)
        counts += torch.bincount(index, minlength=n_classes)
    return fuzziness(total, sums, counts)


@pytest.mark.parametrize("spread", [0.1, 3.0])
def test_streamed_fuzziness_equals_the_definition(spread):
    rng = np.random.default_rng(0)
    centres = rng.normal(size=(6, 4)) * 3
    labels = rng.integers(0, 6, size=500)
    rows = centres[labels] + spread * rng.normal(size=(500, 4))
    assert streamed(rows, labels, 6, chunk=37) == pytest.approx(
        direct_fuzziness(rows, labels), rel=1e-9
    )


def test_separated_classes_are_less_fuzzy_than_mixed_ones():
    rng = np.random.default_rng(1)
    labels = rng.integers(0, 5, size=400)
    centres = rng.normal(size=(5, 8)) * 10
    separated = centres[labels] + rng.normal(size=(400, 8))
    mixed = rng.normal(size=(400, 8))
    assert streamed(separated, labels, 5, 64) < 0.1 < 10 < streamed(mixed, labels, 5, 64)


def test_classes_are_the_frequent_next_tokens():
    # Sequence 0: 5 7 5 7 5 (next tokens 7 5 7 5), sequence 1: 1 5 9 (BOS 1 special).
    tokens = pl.DataFrame(
        {
            "sentence_id": [0] * 5 + [1] * 3,
            "position": [0, 1, 2, 3, 4, 0, 1, 2],
            "token_id": [5, 7, 5, 7, 5, 1, 5, 9],
            "is_special": [False] * 5 + [True, False, False],
        }
    )
    assert fuzziness_classes(tokens, min_rows=2, max_classes=10).tolist() == [5, 7]
    assert fuzziness_classes(tokens, min_rows=1, max_classes=1).tolist() == [5]


def test_too_few_classes_is_a_clear_error(pass_facts):
    with pytest.raises(LayerlawsError, match=r"lower equilearning\.fuzziness\.min_rows"):
        SeparationFuzziness(pass_facts, ["model"], np.array([3]))


@pytest.fixture
def pass_facts(llama_folder, tmp_path):
    return prepare_model({"source": {"kind": "local", "path": str(llama_folder)}}, tmp_path / "m")


def test_a_model_pass_measures_what_the_kept_rows_give(llama_folder, texts, tmp_path):
    """Every layer and norm of a tiny Llama's pass against the definition on the states
    the same pass kept."""
    facts = prepare_model({"source": {"kind": "local", "path": str(llama_folder)}}, tmp_path / "m")
    sentences = pl.DataFrame({"sentence_id": range(60), "text": texts[:60], "source": ["t"] * 60})
    tokens = tokenize_sentences(sentences, load_tokenizer(tmp_path / "m"), max_tokens=20)
    classes = fuzziness_classes(tokens, min_rows=15, max_classes=8)
    observer = SeparationFuzziness(facts, ["model", "none"], classes)
    rows = text_rows(tokens)
    writer = HiddenStateWriter(tmp_path / "h", facts, rows, "float32", 1000)
    model = load_model(tmp_path / "m", "float32", "cpu")
    report = run_forward_pass(model, facts, tokens, [observer, writer], 7, "cpu", progress=False)
    writer.finish(report)
    hidden = HiddenStates.open(tmp_path / "h")
    ids, defined = target_ids(hidden.rows, [1])
    counted = defined[:, 0] & np.isin(ids[:, 0], classes)
    table = observer.table()
    assert len(table) == (facts.num_layers + 1) * 2 and set(table["n_classes"]) == {len(classes)}
    for row in table.iter_rows(named=True):
        states = torch.from_numpy(hidden.layer(row["layer"]).astype(np.float64))
        norm = row["norm"] if row["layer"] < facts.num_layers else "output"
        features = normalized(states, norm, facts).numpy()[counted]
        assert row["n_rows"] == counted.sum()
        expected = direct_fuzziness(features, ids[counted, 0])
        assert row["fuzziness"] == pytest.approx(expected, rel=1e-6), row
