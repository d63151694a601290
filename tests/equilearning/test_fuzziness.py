"""Separation fuzziness streamed in batches against a direct float64 computation from
the rows (numpy), on synthetic classes and through a model pass."""

from __future__ import annotations

from types import SimpleNamespace

import numpy as np
import polars as pl
import pytest
import torch

from layerlaws.core.errors import LayerlawsError
from layerlaws.core.progress import ProgressSaves
from layerlaws.equilearning.fuzziness import (
    FuzzinessClasses,
    SeparationFuzziness,
    counted_classes,
    fuzziness,
    fuzziness_classes,
)
from layerlaws.equilearning.regression import Moments
from layerlaws.equilearning.settings import FuzzinessSettings
from layerlaws.equilearning.statistics import normalized, target_ids
from layerlaws.forward.kept_states import HiddenStates
from layerlaws.forward.kept_writer import HiddenStateWriter
from layerlaws.forward.model_pass import run_forward_pass, text_rows
from layerlaws.forward.observers import progress_of, restore
from layerlaws.models.facts import ModelFacts
from layerlaws.models.loading import load_model, load_tokenizer
from layerlaws.models.preparation import prepare_model
from layerlaws.text.tokens import tokenize_sentences


def direct_fuzziness(rows: np.ndarray, labels: np.ndarray) -> float:
    """Tr(SS_w SS_b⁺) straight from He & Su's definition (Fig. S8), every class of
    ``labels`` counted: SS_w = (1/N) Σ_c Σ_{i∈c} (h_i − μ_c)(h_i − μ_c)ᵀ,
    SS_b = (1/N) Σ_c n_c (μ_c − μ)(μ_c − μ)ᵀ; float64."""
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
    folded = sums.T @ (sums / counts[:, None])
    return fuzziness(total, folded, torch.zeros(rows.shape[1], dtype=torch.float64))


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


def test_classes_are_every_next_token_or_the_frequent_ones():
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
    every = FuzzinessSettings(classes="all", min_rows=2, max_classes=1)
    classes = counted_classes(tokens, every)
    assert classes.ids.tolist() == [5, 7, 9] and classes.sizes.tolist() == [2, 2, 1]
    assert classes.n_open_at_most == 2
    itself = counted_classes(tokens, every, target_offset=0)
    assert itself.ids.tolist() == [5, 7, 9] and itself.sizes.tolist() == [4, 2, 1]
    frequent = counted_classes(
        tokens, FuzzinessSettings(classes="frequent", min_rows=2, max_classes=10)
    )
    assert frequent.ids.tolist() == [5, 7] and frequent.sizes.tolist() == [2, 2]


def small_facts(num_layers: int, hidden_size: int) -> ModelFacts:
    """Facts of a pre-LN model of these sizes (no weights: the states are synthetic)."""
    return ModelFacts(
        model_type="llama",
        num_layers=num_layers,
        hidden_size=hidden_size,
        vocab_size=500,
        norm_type="rmsnorm",
        norm_eps=1e-6,
        post_ln=False,
        tied_embeddings=False,
        max_positions=None,
        parameters=0,
        weights_dtype="float32",
        weights=None,
        source={},
    )


SEQUENCES, LENGTH, BATCH = 40, 9, 7


@pytest.fixture
def many_small_classes():
    """A pre-LN model's synthetic states of 40 sequences of 9 tokens, every next token a
    class (ids 0–9 frequent, 10–499 mostly seen once to three times): facts, tokens
    table, each layer's states (rows, 5) float64 and each row's next id (−1: none)."""
    rng = np.random.default_rng(4)
    facts = small_facts(num_layers=2, hidden_size=5)
    ids = np.where(
        rng.random((SEQUENCES, LENGTH)) < 0.4,
        rng.integers(0, 10, (SEQUENCES, LENGTH)),
        rng.integers(10, 500, (SEQUENCES, LENGTH)),
    )
    tokens = pl.DataFrame(
        {
            "sentence_id": np.repeat(np.arange(SEQUENCES), LENGTH),
            "position": np.tile(np.arange(LENGTH), SEQUENCES),
            "token_id": ids.reshape(-1),
            "is_special": np.zeros(SEQUENCES * LENGTH, dtype=bool),
        }
    )
    next_ids = np.column_stack([ids[:, 1:], np.full(SEQUENCES, -1)]).reshape(-1)
    centres = rng.normal(size=(500, facts.hidden_size)) * 2
    states = [
        centres[np.maximum(next_ids, 0)] * (layer + 1) + rng.normal(size=(len(next_ids), 5))
        for layer in range(facts.num_layers + 1)
    ]
    return facts, tokens, states, next_ids


def every_class(tokens: pl.DataFrame) -> FuzzinessClasses:
    return counted_classes(tokens, FuzzinessSettings(classes="all", min_rows=20, max_classes=2))


def feed(observer, tokens, states, batches=range(0, SEQUENCES, BATCH), after_layer=None):
    """Show ``observer`` the ``batches`` (first sequence of each, BATCH sequences) of every
    layer, calling ``after_layer()`` after each layer."""
    for first in batches:
        batch = tokens.filter(pl.col("sentence_id").is_between(first, first + BATCH - 1))
        observer.begin_batch(SimpleNamespace(rows=batch.drop("is_special")))
        at = slice(first * LENGTH, (first + BATCH) * LENGTH)
        for layer in range(len(states)):
            observer.observe(layer, torch.from_numpy(states[layer][at]))
            if after_layer is not None:
                after_layer()


def test_all_classes_with_many_small_ones_match_the_definition(many_small_classes):
    """Every next token a class (most of 1–3 rows, a few large), streamed in batches of
    sequences through the observer, against the definition (He & Su Fig. S8) on the same
    rows. The class sums stay on the CPU, at no time more of them per layer and norm than
    classes of two rows or more, none after the pass; the table needs every row."""
    facts, tokens, states, next_ids = many_small_classes
    sizes = np.bincount(next_ids[next_ids >= 0])
    assert (sizes == 1).sum() > 50 and ((sizes == 2) | (sizes == 3)).sum() > 20
    classes = every_class(tokens)
    observer = SeparationFuzziness(facts, ["none"], classes)
    multi_row = (sizes >= 2).sum()
    held = []

    def record():
        held.extend(sums.held for sums in observer.open.values())
        stored = [block for sums in observer.open.values() for block in sums.blocks]
        assert {block.device.type for block in stored} <= {"cpu"}

    batches = range(0, SEQUENCES, BATCH)
    feed(observer, tokens, states, batches[:-1], record)
    with pytest.raises(LayerlawsError, match="fewer rows"):
        observer.table()
    feed(observer, tokens, states, batches[-1:], record)
    assert 0 < max(held) <= multi_row < len(classes)
    assert observer.held_sums == 0
    counted = next_ids >= 0
    table = observer.table()
    assert set(table["n_classes"]) == {len(np.unique(next_ids[counted]))} == {len(classes)}
    assert set(table["n_rows"]) == {counted.sum()}
    for row in table.iter_rows(named=True):
        expected = direct_fuzziness(states[row["layer"]][counted], next_ids[counted])
        assert row["fuzziness"] == pytest.approx(expected, rel=1e-9), row


def reference_fuzziness(rows: np.ndarray, labels: np.ndarray, cutoff: float) -> float:
    """D = Tr(SS_w SS_b⁺) from the class means (He & Su Fig. S8), float64, SS_b⁺ keeping
    the eigenvalues above ``cutoff`` × the largest, as ``fuzziness`` does."""
    classes, inverse, counts = np.unique(labels, return_inverse=True, return_counts=True)
    means = np.zeros((len(classes), rows.shape[1]))
    np.add.at(means, inverse, rows)
    means /= counts[:, None]
    deviations = rows - means[inverse]
    within = deviations.T @ deviations / len(rows)
    spread = means - rows.mean(axis=0)
    between = (spread * counts[:, None]).T @ spread / len(rows)
    values, vectors = np.linalg.eigh(between)
    keep = values > cutoff * values.max()
    return float(np.trace(within @ (vectors[:, keep] / values[keep]) @ vectors[:, keep].T))


def in_memory_bytes(observer: SeparationFuzziness) -> int:
    """Host memory of the open class sums held outside the spill files."""
    return sum(
        block.nbytes for sums in observer.open.values() for block in sums.blocks[: sums.in_memory]
    )


def test_class_sums_spilled_to_disk_give_the_same_fuzziness(many_small_classes):
    """With host memory for 3 open class sums per layer and norm, the others in spill
    files, the pass holds no more than that in memory, spills, and ends with the table
    of the pass that holds them all in memory, to the bit, and the definition's."""
    facts, tokens, states, next_ids = many_small_classes
    classes, norms = every_class(tokens), ["none", "standardize"]
    budget = 3 * (facts.num_layers * len(norms) + 1) * facts.hidden_size * 8
    spilling = SeparationFuzziness(facts, norms, classes, host_bytes=budget)
    peaks = {"memory": 0, "spilled": 0}

    def record():
        peaks["memory"] = max(peaks["memory"], in_memory_bytes(spilling))
        peaks["spilled"] = max(peaks["spilled"], spilling.spilled_sums)

    feed(spilling, tokens, states, after_layer=record)
    assert 0 < peaks["memory"] <= budget and peaks["spilled"] > 20
    in_memory = SeparationFuzziness(facts, norms, classes)
    feed(in_memory, tokens, states)
    spilled, held = spilling.table(), in_memory.table()
    assert spilled.drop("fuzziness").equals(held.drop("fuzziness"))
    np.testing.assert_array_equal(spilled["fuzziness"], held["fuzziness"])
    counted = next_ids >= 0
    expected = [
        reference_fuzziness(
            normalized(
                torch.from_numpy(states[layer]), norm if layer < 2 else "output", facts
            ).numpy()[counted],
            next_ids[counted],
            1e-12,
        )
        for layer, norm in spilled.select("layer", "norm").iter_rows()
    ]
    # The same float64 sums in another order and another algebra (class means, not
    # streamed class sums): rounding of a few hundred rows, as the tests above allow.
    np.testing.assert_allclose(spilled["fuzziness"], expected, rtol=1e-9)


def test_a_pass_resumed_from_a_save_with_spilled_sums_ends_as_an_uninterrupted_one(
    many_small_classes, tmp_path
):
    """Half the batches, a progress save (``ProgressSaves``, loaded memory-mapped), a
    fresh observer restored from it that spills again and goes on: the same table, to the
    bit, as one pass."""
    facts, tokens, states, _ = many_small_classes
    classes, norms = every_class(tokens), ["none"]
    budget = 2 * (facts.num_layers + 1) * facts.hidden_size * 8
    whole = SeparationFuzziness(facts, norms, classes, host_bytes=budget)
    feed(whole, tokens, states)
    batches = range(0, SEQUENCES, BATCH)
    halves = batches[:3], batches[3:]
    first = SeparationFuzziness(facts, norms, classes, host_bytes=budget)
    feed(first, tokens, states, halves[0])
    assert first.spilled_sums > 0
    saves = ProgressSaves(tmp_path / ".resume" / "fuzziness.csv.pt", "inputs", 0)
    saves.save({"fuzziness": progress_of(first)}, "3 batches")
    resumed = SeparationFuzziness(facts, norms, classes, host_bytes=budget)
    restore(resumed, saves.load()["fuzziness"])
    assert resumed.spilled_sums == first.spilled_sums
    feed(resumed, tokens, states, halves[1])
    np.testing.assert_array_equal(resumed.table()["fuzziness"], whole.table()["fuzziness"])


def test_too_few_classes_is_a_clear_error():
    with pytest.raises(LayerlawsError, match=r"two next-token classes, found 1; sample more"):
        SeparationFuzziness(
            small_facts(2, 4), ["model"], FuzzinessClasses(np.array([3]), np.array([5]))
        )


@pytest.mark.parametrize("classes_setting", ["all", "frequent"])
def test_a_model_pass_measures_what_the_kept_rows_give(
    llama_folder, texts, tmp_path, classes_setting
):
    """Every layer and norm of a tiny Llama's pass against the definition on the states
    the same pass kept: over every next token, and over the frequent ones (at least 15
    rows, at most 8 classes)."""
    facts = prepare_model({"source": {"kind": "local", "path": str(llama_folder)}}, tmp_path / "m")
    sentences = pl.DataFrame({"sentence_id": range(60), "text": texts[:60], "source": ["t"] * 60})
    tokens = tokenize_sentences(sentences, load_tokenizer(tmp_path / "m"), max_tokens=20)
    settings = FuzzinessSettings(classes=classes_setting, min_rows=15, max_classes=8)
    classes = counted_classes(tokens, settings)
    observer = SeparationFuzziness(facts, ["model", "none"], classes)
    rows = text_rows(tokens)
    writer = HiddenStateWriter(tmp_path / "h", facts, rows, "float32", 1000)
    model = load_model(tmp_path / "m", "float32", "cpu")
    report = run_forward_pass(model, facts, tokens, [observer, writer], 7, "cpu", progress=False)
    writer.finish(report)
    hidden = HiddenStates.open(tmp_path / "h")
    ids, defined = target_ids(hidden.rows, [1])
    counted = defined[:, 0] & np.isin(ids[:, 0], classes.ids)
    table = observer.table()
    assert len(table) == (facts.num_layers + 1) * 2 and set(table["n_classes"]) == {len(classes)}
    for row in table.iter_rows(named=True):
        states = torch.from_numpy(hidden.layer(row["layer"]).astype(np.float64))
        norm = row["norm"] if row["layer"] < facts.num_layers else "output"
        features = normalized(states, norm, facts).numpy()[counted]
        assert row["n_rows"] == counted.sum()
        expected = direct_fuzziness(features, ids[counted, 0])
        assert row["fuzziness"] == pytest.approx(expected, rel=1e-6), row
