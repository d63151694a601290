"""Yao & Xu's addition tasks: the data follow the task definitions, the signatures equal
counts done here by hand, R_order is Pearson's r on the off-diagonal pairs, training is
deterministic and stacking seeds changes nothing, and the stage runs in Snakemake."""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import polars as pl
import pytest
import scipy.stats
from snakemake_runs import run_ok, write_config

from layerlaws.core.errors import LayerlawsError
from layerlaws.core.geometry import cosine_matrix
from layerlaws.synthetic.models import train_addition
from layerlaws.synthetic.settings import SyntheticTrainingSettings
from layerlaws.synthetic.summary import alignment
from layerlaws.synthetic.tasks import (
    TASKS,
    AdditionTask,
    generate,
    r_order,
    signatures,
)

ANCHORS, KEYS = [11, 20], [101, 140]


@pytest.mark.parametrize("kind", TASKS)
def test_data_follow_the_task_definitions(kind):
    task = AdditionTask.of(kind, ANCHORS, KEYS)
    inputs = task.inputs()
    assert len(inputs) == 10 * 10 * 40
    z, first, second = inputs.T
    assert set(first) == set(second) == set(range(11, 21))
    labels = task.labels(inputs)
    if kind == "mod":
        assert set(z) == set(range(101, 141))
        np.testing.assert_array_equal(labels, 101 + (z + first + second) % 40)
    else:
        np.testing.assert_array_equal(labels, z + first + second)
    for pair in {(a, b) for a, b in zip(first, second, strict=True)}:
        mine = (first == pair[0]) & (second == pair[1])
        if kind == "add":
            assert set(z[mine]) == set(range(101, 141))
        else:  # f̃_add and f_mod: every anchor pair shares the label domain Y
            assert set(labels[mine]) == set(range(101, 141))
    data = generate(task, 3000, 0.25, seed=4)
    assert len(data.train_inputs) == 3000 and len(data.test_inputs) == 1000
    train_set = {tuple(row) for row in data.train_inputs}
    test_set = {tuple(row) for row in data.test_inputs}
    assert not train_set & test_set
    np.testing.assert_array_equal(data.train_labels, task.labels(data.train_inputs))
    again = generate(task, 3000, 0.25, seed=4)
    np.testing.assert_array_equal(again.train_inputs, data.train_inputs)


def test_keys_must_lie_above_the_anchor_sums():
    with pytest.raises(LayerlawsError, match="must lie above"):
        AdditionTask.of("add", [11, 20], [30, 60])


@pytest.mark.parametrize("kind", TASKS)
def test_signatures_equal_counts_by_hand(kind):
    task = AdditionTask.of(kind, ANCHORS, KEYS)
    data = generate(task, 2000, 0.2, seed=1)
    found = signatures(task, data.train_inputs, data.train_labels)
    vocab = task.vocab_size
    for index, anchor in enumerate(task.anchors):
        samples = [
            (set(row.tolist()), int(label))
            for row, label in zip(data.train_inputs, data.train_labels, strict=True)
            if anchor in row
        ]
        label_counts = np.zeros(vocab)
        context_counts = np.zeros(vocab)
        for tokens, label in samples:
            label_counts[label] += 1
            for token in tokens:
                if token not in task.anchors:
                    context_counts[token] += 1
        np.testing.assert_allclose(found.label[index], label_counts / len(samples))
        np.testing.assert_allclose(found.context[index], context_counts / len(samples))
        joint = found.context_given_label[index].reshape(vocab, vocab)
        for label in {label for _, label in samples}:
            given = [tokens for tokens, of in samples if of == label]
            expected = np.zeros(vocab)
            for tokens in given:
                for token in tokens - set(task.anchors):
                    expected[token] += 1
            np.testing.assert_allclose(joint[label], expected / len(given))
    for row, label in zip(found.label_context, found.label_domain, strict=True):
        rows = data.train_inputs[data.train_labels == label]
        expected = np.zeros(vocab)
        for tokens in rows:
            for token in set(tokens.tolist()):
                expected[token] += 1
        np.testing.assert_allclose(row, expected / len(rows))


def test_the_distinct_signature_is_the_ordered_one():
    """f_add: φ^y orders the anchors, φ^X is nearly identical across them; f̃_add the other
    way round; f_mod: only φ^(X|y) orders them (paper §5, Fig. 3A)."""
    orders = {}
    for kind in TASKS:
        task = AdditionTask.of(kind, ANCHORS, KEYS)
        data = generate(task, 50000, 0.0, seed=0)
        found = signatures(task, data.train_inputs, data.train_labels)
        orders[kind] = {
            name: r_order(cosine_matrix(getattr(found, name)), task.anchors)
            for name in ("label", "context", "context_given_label")
        }
    assert orders["add"]["label"] < -0.9 and abs(orders["add"]["context"]) < 0.5
    assert orders["add_same_range"]["context"] < -0.9
    assert abs(orders["add_same_range"]["label"]) < 0.5
    assert orders["mod"]["context_given_label"] < -0.9
    assert abs(orders["mod"]["label"]) < 0.5 and abs(orders["mod"]["context"]) < 0.5


def test_r_order_is_pearson_on_the_off_diagonal_pairs():
    rng = np.random.default_rng(3)
    rows = rng.normal(size=(10, 7))
    cosines = cosine_matrix(rows)
    anchors = list(range(11, 21))
    distance = np.abs(np.subtract.outer(anchors, anchors))
    off = ~np.eye(10, dtype=bool)
    expected = scipy.stats.pearsonr(cosines[off], distance[off]).statistic
    assert r_order(cosines, anchors) == pytest.approx(expected)
    assert r_order(-distance.astype(float), anchors) == pytest.approx(-1.0)
    assert alignment(rows, rows) == pytest.approx(1.0)


SMALL = SyntheticTrainingSettings(
    hidden_size=16, learning_rate=1e-2, batch_size=50, epochs=3, records=[0, 1, 3], seeds=(0, 1)
)


def test_training_is_deterministic_and_seeds_stack_independently():
    task = AdditionTask.of("add", ANCHORS, KEYS)
    data = generate(task, 1000, 0.2, seed=0)
    domain = np.unique(data.train_labels)
    first = train_addition(task, "ffn", data, SMALL, domain)
    second = train_addition(task, "ffn", data, SMALL, domain)
    assert first.rows == second.rows
    np.testing.assert_array_equal(first.anchor_embeddings[-1], second.anchor_embeddings[-1])
    alone = train_addition(task, "ffn", data, replace(SMALL, seeds=(1,)), domain)
    np.testing.assert_allclose(
        alone.anchor_embeddings[-1][0], first.anchor_embeddings[-1][1], rtol=1e-5, atol=1e-7
    )
    assert [row["epoch"] for row in first.rows] == [0, 0, 1, 1, 3, 3]


def test_the_linear_model_orders_the_anchors_of_f_add():
    task = AdditionTask.of("add", ANCHORS, KEYS)
    data = generate(task, 5000, 0.2, seed=0)
    settings = SyntheticTrainingSettings(learning_rate=1e-3, epochs=10, records=[0, 10], seeds=(0,))
    record = train_addition(task, "linear", data, settings, np.unique(data.train_labels))
    initial, final = record.rows
    assert abs(initial["r_order"]) < 0.5 and final["r_order"] < -0.8
    assert final["train_accuracy"] > initial["train_accuracy"]


def test_the_stage_runs_in_snakemake(tmp_path):
    write_config(
        tmp_path,
        {
            "synthetic": {
                "tasks": ["add", "mod"],
                "models": ["linear", "ffn"],
                "n_samples": 1000,
                "hidden_size": 16,
                "learning_rate": 1e-2,
                "epochs": 2,
                "records": 3,
                "seeds": [0, 1],
            },
        },
    )
    run_ok(tmp_path)
    results = tmp_path / "results/synthetic"
    summary = pl.read_csv(results / "summary.csv")
    assert summary.height == 4 and (summary["seeds"] == 2).all()
    assert {"r_order_mean", "r_order_sd", "alignment_label"} <= set(summary.columns)
    table = pl.read_csv(results / "add/linear/r_order.csv")
    assert table.columns == ["epoch", "seed", "r_order", "train_accuracy", "test_accuracy"]
    assert sorted(table["epoch"].unique()) == [0, 1, 2]
    for name in ("dynamics", "embeddings", "signatures", "unembedding"):
        assert (results / f"{name}.svg").stat().st_size > 1000
    assert pl.read_csv(results / "mod/signatures.csv").height == 3
