"""Yao & Xu's addition tasks: the data follow the task definitions (with or without a
held-out split), the signatures equal counts done here from Eq. 4, those the paper calls
identical across anchors are, R_order is Pearson's r on the off-diagonal pairs, training is
deterministic, stacking seeds changes nothing, the snapshot epoch holds that epoch's
weights, and the stage runs in Snakemake."""

from __future__ import annotations

from dataclasses import replace

import matplotlib
import numpy as np
import polars as pl
import pytest
import scipy.stats
import torch
from snakemake_runs import run_ok, write_config

from layerlaws.core.errors import LayerlawsError
from layerlaws.core.geometry import cosine_matrix, off_diagonal
from layerlaws.synthetic.comparison import COMPARISON_SCHEMA
from layerlaws.synthetic.models import (
    accuracy,
    initial_embeddings,
    loss_gradients,
    train_addition,
)
from layerlaws.synthetic.plots import (
    anchor_rows,
    plot_distinct_signatures,
    plot_dynamics,
    plot_weight_pca,
)
from layerlaws.synthetic.settings import ShownLabels, SyntheticTrainingSettings
from layerlaws.synthetic.summary import alignment
from layerlaws.synthetic.tasks import (
    SIGNATURE_INPUTS,
    TASKS,
    AdditionTask,
    generate,
    r_order,
    signatures,
)
from layerlaws.synthetic.workflow import SYNTHETIC_FIGURES

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
    whole = generate(task, 50000, 0.0, seed=4)
    assert whole.test_inputs.shape == (0, 3) and whole.test_labels.shape == (0,)
    assert {tuple(row) for row in whole.train_inputs} == {tuple(row) for row in inputs}


def test_keys_must_lie_above_the_anchor_sums():
    with pytest.raises(LayerlawsError, match="must lie above"):
        AdditionTask.of("add", [11, 20], [30, 60])


@pytest.mark.parametrize("kind", TASKS)
def test_other_ranges_make_another_task(kind):
    """``anchors`` and ``keys`` reach the task: A = {3, 4, 5}, Z = Y = {20 … 25}."""
    task = AdditionTask.of(kind, [3, 5], [20, 25])
    inputs = task.inputs()
    z, first, second = inputs.T
    assert len(inputs) == 3 * 3 * 6 and set(first) == set(second) == {3, 4, 5}
    labels = task.labels(inputs)
    if kind == "mod":
        np.testing.assert_array_equal(labels, 20 + (z + first + second) % 6)
    else:
        np.testing.assert_array_equal(labels, z + first + second)
    shared = labels if kind != "add" else z  # f_add: Z for every pair; else Y for every pair
    for pair in {(a, b) for a, b in zip(first, second, strict=True)}:
        mine = (first == pair[0]) & (second == pair[1])
        assert set(shared[mine]) == set(range(20, 26))


def test_another_data_seed_holds_out_and_draws_other_inputs():
    """``synthetic.data_seed``: the held-out inputs and the training draws change with it."""
    task = AdditionTask.of("add", ANCHORS, KEYS)
    first, other = generate(task, 3000, 0.25, seed=4), generate(task, 3000, 0.25, seed=5)
    held = {tuple(row) for row in first.test_inputs}
    other_held = {tuple(row) for row in other.test_inputs}
    assert len(held) == len(other_held) == 1000 and held != other_held
    assert not np.array_equal(first.train_inputs, other.train_inputs)


@pytest.mark.parametrize("signature_inputs", SIGNATURE_INPUTS)
@pytest.mark.parametrize("kind", TASKS)
def test_signatures_equal_a_direct_count_of_eq_4(kind, signature_inputs):
    """Yao & Xu §4 (Eq. 4), counted sample by sample: x ∈ X is membership of the set of
    X's tokens; ``keys`` leaves the anchors out of x′ in φ^X_α and φ^(X|y)_α."""
    task = AdditionTask.of(kind, [1, 3], [7, 10])
    data = generate(task, 400, 0.25, seed=2)
    found = signatures(task, data.train_inputs, data.train_labels, signature_inputs)
    vocab = task.vocab_size
    samples = [
        (set(row.tolist()), int(y))
        for row, y in zip(data.train_inputs, data.train_labels, strict=True)
    ]
    tokens = [t for t in range(vocab) if signature_inputs == "all" or t not in task.anchors]
    for index, x in enumerate(task.anchors):
        with_x = [(X, y) for X, y in samples if x in X]
        phi_y = np.zeros(vocab)
        phi_x = np.zeros(vocab)
        phi_xy = np.zeros((vocab, vocab))
        for nu in range(vocab):
            phi_y[nu] = sum(y == nu for _, y in with_x) / len(with_x)
            given = [X for X, y in with_x if y == nu]
            for other in tokens:
                if given:
                    phi_xy[nu, other] = sum(other in X for X in given) / len(given)
        for other in tokens:
            phi_x[other] = sum(other in X for X, _ in with_x) / len(with_x)
        np.testing.assert_allclose(found.label[index], phi_y, rtol=1e-12)
        np.testing.assert_allclose(found.context[index], phi_x, rtol=1e-12)
        np.testing.assert_allclose(
            found.context_given_label[index].reshape(vocab, vocab), phi_xy, rtol=1e-12
        )
        if signature_inputs == "all":
            assert found.context[index, x] == 1.0  # P(α ∈ X | α ∈ X)
    assert list(found.label_domain) == sorted({y for _, y in samples})
    for row, nu in zip(found.label_context, found.label_domain, strict=True):
        given = [X for X, y in samples if y == nu]
        expected = [sum(t in X for X in given) / len(given) for t in range(vocab)]
        np.testing.assert_allclose(row, expected, rtol=1e-12)


IDENTICAL = {"add": ["context"], "add_same_range": ["label"], "mod": ["label", "context"]}
"""The signatures Yao & Xu §5 call identical across anchors, per task."""
DISTINCT = {"add": "label", "add_same_range": "context", "mod": "context_given_label"}
"""The signature §5 calls distinct across anchors, per task."""


def _swap(row: np.ndarray, first: int, second: int) -> np.ndarray:
    swapped = row.copy()
    swapped[[first, second]] = swapped[[second, first]]
    return swapped


@pytest.mark.parametrize("kind", TASKS)
def test_the_paper_s_identical_signatures_are_identical_without_a_test_split(kind):
    """Over the whole task (every distinct input once: the distribution the paper's data
    are drawn from) the signatures §5 calls identical are: exactly over the keys, and with
    Eq. 4's anchors up to exchanging the two anchors' own tokens (so every anchor pair has
    the same cosine). 50,000 draws with ``test_fraction`` 0 match them but for sampling
    noise; the signature that differs across anchors does differ."""
    task = AdditionTask.of(kind, ANCHORS, KEYS)
    inputs = task.inputs()
    keys_only = signatures(task, inputs, task.labels(inputs), "keys")
    every = signatures(task, inputs, task.labels(inputs), "all")
    first = task.anchors[0]
    for name in IDENTICAL[kind]:
        for index, anchor in enumerate(task.anchors):
            np.testing.assert_allclose(getattr(keys_only, name)[index], getattr(keys_only, name)[0])
            np.testing.assert_allclose(
                _swap(getattr(every, name)[index], first, anchor), getattr(every, name)[0]
            )
        assert np.ptp(off_diagonal(cosine_matrix(getattr(every, name)))) < 1e-12
    assert np.ptp(off_diagonal(cosine_matrix(getattr(keys_only, DISTINCT[kind])))) > 0.1
    drawn = generate(task, 50000, 0.0, seed=0)
    sampled = signatures(task, drawn.train_inputs, drawn.train_labels, "keys")
    for name in IDENTICAL[kind]:
        assert off_diagonal(cosine_matrix(getattr(sampled, name))).min() > 0.99


@pytest.mark.parametrize("signature_inputs", SIGNATURE_INPUTS)
def test_the_distinct_signature_is_the_ordered_one(signature_inputs):
    """Over the whole task the signature §5 calls distinct orders the anchors (paper
    Fig. 3A: f_add φ^y, f̃_add φ^X, f_mod φ^(X|y)), with or without the anchors' own
    tokens."""
    for kind in TASKS:
        task = AdditionTask.of(kind, ANCHORS, KEYS)
        inputs = task.inputs()
        found = signatures(task, inputs, task.labels(inputs), signature_inputs)
        assert r_order(cosine_matrix(getattr(found, DISTINCT[kind])), task.anchors) < -0.9


def test_the_paper_s_data_keep_the_order_over_the_keys_only():
    """50,000 draws without a test split (the paper's data), x′ over the keys: each task's
    distinct signature orders the anchors and the others do not (Fig. 3A). Counting the
    anchors' own tokens (Eq. 4 as written) adds terms common to every anchor pair that
    squeeze f̃_add's φ^X cosines into a span under 0.01, which sampling noise hides."""
    orders = {}
    for kind in TASKS:
        task = AdditionTask.of(kind, ANCHORS, KEYS)
        data = generate(task, 50000, 0.0, seed=0)
        found = signatures(task, data.train_inputs, data.train_labels, "keys")
        orders[kind] = {
            name: r_order(cosine_matrix(getattr(found, name)), task.anchors)
            for name in ("label", "context", "context_given_label")
        }
    assert orders["add"]["label"] < -0.9 and abs(orders["add"]["context"]) < 0.5
    assert orders["add_same_range"]["context"] < -0.9
    assert abs(orders["add_same_range"]["label"]) < 0.5
    assert orders["mod"]["context_given_label"] < -0.9
    assert abs(orders["mod"]["label"]) < 0.5 and abs(orders["mod"]["context"]) < 0.5
    task = AdditionTask.of("add_same_range", ANCHORS, KEYS)
    inputs = task.inputs()
    exact = signatures(task, inputs, task.labels(inputs), "all").context
    assert np.ptp(off_diagonal(cosine_matrix(exact))) < 0.01
    data = generate(task, 50000, 0.0, seed=0)
    sampled = signatures(task, data.train_inputs, data.train_labels, "all").context
    assert abs(r_order(cosine_matrix(sampled), task.anchors)) < 0.5


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


@pytest.mark.parametrize("model", ["linear", "ffn"])
def test_the_gradients_by_hand_equal_autograd_through_the_models_definition(model):
    """loss_gradients against autograd in float64 on F(X) = W_U σ(Σ_{x∈X} W_E[x]) written as
    one-hot token counts times W_E (σ the ReLU for F_ffn, the identity for F_lin) and the
    sum over seeds of each seed's mean cross-entropy; one input holds an anchor twice, and
    about half the hidden units are below zero."""
    rng = np.random.default_rng(5)
    seeds, vocab, width, batch = 2, 12, 6, 9
    inputs = torch.from_numpy(rng.integers(0, vocab, (seeds, batch, 3)))
    inputs[0, 0, 2] = inputs[0, 0, 1]
    labels = torch.from_numpy(rng.integers(0, vocab, (seeds, batch)))
    embedding = torch.from_numpy(rng.normal(size=(seeds, vocab, width))).requires_grad_()
    unembedding = torch.from_numpy(rng.normal(size=(seeds, vocab, width))).requires_grad_()
    counts = torch.nn.functional.one_hot(inputs, vocab).sum(dim=2).double()
    hidden = counts @ embedding
    assert 0.3 < float((hidden < 0).double().mean()) < 0.7
    hidden = torch.relu(hidden) if model == "ffn" else hidden
    scores = hidden @ unembedding.transpose(1, 2)
    losses = [torch.nn.functional.cross_entropy(scores[s], labels[s]) for s in range(seeds)]
    sum(losses).backward()
    found = loss_gradients(model, embedding.detach(), unembedding.detach(), inputs, labels)
    np.testing.assert_allclose(found[0].numpy(), embedding.grad.numpy(), rtol=1e-12, atol=1e-14)
    np.testing.assert_allclose(found[1].numpy(), unembedding.grad.numpy(), rtol=1e-12, atol=1e-14)


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


def reference_training(
    task: AdditionTask, model: str, data, settings: SyntheticTrainingSettings, seed: int
) -> tuple[np.ndarray, np.ndarray]:
    """W_E and W_U (vocab, d) of one seed after ``settings.epochs`` epochs, trained as Yao &
    Xu's Appendix A states it, written here with torch autograd and torch.optim.AdamW
    (default betas): every weight N(0, d^−γ), one (2, vocab, d) draw (W_E, then W_U) from a
    generator seeded ``seed``; F(X) = W_U σ(Σ_{x∈X} W_E[x]) as one-hot token counts times
    W_E (σ the ReLU for F_ffn, the identity for F_lin); the mean cross-entropy of each
    mini-batch of ``batch_size`` samples, taken in the order of the epoch's permutation
    seeded (seed, epoch), an incomplete last batch skipped."""
    vocab, width = task.vocab_size, settings.hidden_size
    generator = torch.Generator().manual_seed(seed)
    drawn = torch.randn(2, vocab, width, generator=generator) * width ** (
        -settings.init_exponent / 2
    )
    embedding, unembedding = (drawn[i].clone().requires_grad_() for i in range(2))
    optimizer = torch.optim.AdamW(
        [embedding, unembedding], lr=settings.learning_rate, weight_decay=settings.weight_decay
    )
    inputs = torch.from_numpy(data.train_inputs)
    counts = torch.nn.functional.one_hot(inputs, vocab).sum(dim=1).float()
    labels = torch.from_numpy(data.train_labels)
    size = settings.batch_size
    for epoch in range(1, settings.epochs + 1):
        order = torch.from_numpy(np.random.default_rng((seed, epoch)).permutation(len(labels)))
        for start in range(0, len(labels) - size + 1, size):
            batch = order[start : start + size]
            hidden = counts[batch] @ embedding
            hidden = torch.relu(hidden) if model == "ffn" else hidden
            loss = torch.nn.functional.cross_entropy(hidden @ unembedding.T, labels[batch])
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
    return embedding.detach().double().numpy(), unembedding.detach().double().numpy()


@pytest.mark.parametrize("model", ["linear", "ffn"])
def test_every_training_setting_reaches_the_weights(model):
    """A seed other than 0 and d, γ, learning rate, weight decay, batch size and epochs
    other than the defaults, against ``reference_training`` (both float32: the library's
    hand gradients and fused AdamW differ from it by about 1e-7 of the largest weight);
    any one of these settings ignored moves the weights by 10 % of the largest or more."""
    task = AdditionTask.of("add", ANCHORS, KEYS)
    data = generate(task, 600, 0.2, seed=0)
    settings = SyntheticTrainingSettings(
        hidden_size=8,
        init_exponent=0.5,
        learning_rate=2e-2,
        weight_decay=0.3,
        batch_size=40,
        epochs=2,
        records=[2],
        seeds=(3,),
        snapshot_epoch=2,
    )
    domain = np.unique(data.train_labels)
    record = train_addition(task, model, data, settings, domain)
    assert record.epochs == [2]
    embedding, unembedding = reference_training(task, model, data, settings, seed=3)
    found_anchors, found_labels = record.anchor_embeddings[-1][0], record.label_unembeddings[-1][0]
    np.testing.assert_allclose(found_anchors, embedding[list(task.anchors)], rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(found_labels, unembedding[domain], rtol=1e-5, atol=1e-6)


def test_the_snapshot_epoch_holds_that_epoch_s_weights():
    """The snapshot epoch is recorded even when ``records`` skips it, with the weights a
    training stopping there ends with; beyond the last epoch it is the last epoch."""
    task = AdditionTask.of("add", ANCHORS, KEYS)
    data = generate(task, 1000, 0.2, seed=0)
    domain = np.unique(data.train_labels)
    settings = replace(SMALL, records=[0, 3], snapshot_epoch=2)
    record = train_addition(task, "linear", data, settings, domain)
    assert record.epochs == [0, 2, 3] and record.snapshot_epoch == 2
    stopped = train_addition(task, "linear", data, replace(settings, epochs=2, records=[2]), domain)
    np.testing.assert_array_equal(record.anchor_embeddings[1], stopped.anchor_embeddings[-1])
    np.testing.assert_array_equal(record.label_unembeddings[1], stopped.label_unembeddings[-1])
    assert not np.array_equal(record.anchor_embeddings[1], record.anchor_embeddings[2])
    beyond = train_addition(task, "linear", data, replace(SMALL, snapshot_epoch=120), domain)
    assert beyond.snapshot_epoch == 3 and beyond.epochs == [0, 1, 3]


def test_accuracy_is_nan_without_inputs_and_counts_hits_otherwise():
    task = AdditionTask.of("add", ANCHORS, KEYS)
    embedding, unembedding = initial_embeddings([0, 1], task.vocab_size, 8, 0.8)
    empty = accuracy("ffn", embedding, unembedding, np.zeros((0, 3), np.int64), np.zeros(0))
    assert empty.shape == (2,) and np.isnan(empty).all()
    inputs = task.inputs()[:50]
    summed = embedding[:, inputs].sum(dim=2)
    predicted = (summed @ unembedding.transpose(1, 2)).argmax(dim=2).numpy()
    labels = predicted[0].copy()
    expected = [1.0, float(np.mean(predicted[1] == labels))]
    np.testing.assert_allclose(accuracy("linear", embedding, unembedding, inputs, labels), expected)


def test_a_shown_label_outside_the_task_is_named():
    """Yao & Xu's Fig. 1A shows f_mod's φ^(X|y) at y = 160, which f_mod's labels (101…140)
    never take."""
    task = AdditionTask.of("mod", ANCHORS, KEYS)
    found = signatures(task, task.inputs(), task.labels(task.inputs()))
    arrays = {"label": found.label, "context_given_label": found.context_given_label}
    arrays["label_domain"] = found.label_domain
    rows = anchor_rows(arrays, "mod", "context_given_label", 120)
    vocab = task.vocab_size
    np.testing.assert_array_equal(rows[3], found.context_given_label[3].reshape(vocab, vocab)[120])
    with pytest.raises(LayerlawsError, match=r"shown_labels\.mod: 160 is not a label.*101…140"):
        anchor_rows(arrays, "mod", "context_given_label", 160)


def test_a_label_no_sample_holds_leaves_its_panel_empty_saying_so(tmp_path):
    """A small sample (the rehearsal's 50 of f_mod) can miss the label Fig. 1A shows: the
    panel says so instead of the figure job failing."""
    task = AdditionTask.of("mod", ANCHORS, KEYS)
    inputs = task.inputs()
    shown_anchors = np.isin(inputs[:, 1:], [task.anchors[0], task.anchors[-1]]).any(axis=1)
    kept = (task.labels(inputs) != 120) | ~shown_anchors  # 120 a label, not of those anchors
    found = signatures(task, inputs[kept], task.labels(inputs[kept]))
    arrays = {
        "anchors": np.array(task.anchors),
        "label": found.label,
        "context_given_label": found.context_given_label,
        "label_domain": found.label_domain,
        "signature_inputs": np.array("all"),
    }
    assert not anchor_rows(arrays, "mod", "context_given_label", 120)[[0, -1]].any()
    options = {"format": "svg", "dpi": 50, "width": 6.0}
    with matplotlib.rc_context({"svg.fonttype": "none"}):
        plot_distinct_signatures(
            {"mod": arrays},
            ShownLabels(add=150, add_same_range=120, mod=120),
            path=tmp_path / "s.svg",
            options=options,
        )
    assert "no training sample holds this label" in (tmp_path / "s.svg").read_text()


def test_the_figures_say_what_they_show(tmp_path):
    """Without test inputs the accuracy panel says so; the PCA figures name the snapshot
    epoch and mark a model that was not trained (text kept as text in the SVG)."""
    task = AdditionTask.of("add", ANCHORS, KEYS)
    data = generate(task, 1000, 0.0, seed=0)
    domain = np.unique(data.train_labels)
    settings = replace(SMALL, snapshot_epoch=2, seeds=(0,))
    record = train_addition(task, "linear", data, settings, domain)
    weights = {
        ("add", "linear"): {
            "epochs": np.array(record.epochs),
            "snapshot_epoch": np.array(record.snapshot_epoch),
            "anchors": np.array(task.anchors),
            "label_domain": domain,
            "anchor_embeddings": np.stack(record.anchor_embeddings),
            "label_unembeddings": np.stack(record.label_unembeddings),
        }
    }
    options = {"format": "svg", "dpi": 50, "width": 6.0}
    with matplotlib.rc_context({"svg.fonttype": "none"}):
        plot_dynamics(
            {("add", "linear"): pl.DataFrame(record.rows)}, path=tmp_path / "d.svg", options=options
        )
        plot_weight_pca(
            weights,
            ["add"],
            "linear",
            "anchor_embeddings",
            path=tmp_path / "e.svg",
            options=options,
        )
        plot_weight_pca(
            weights, ["add"], "ffn", "label_unembeddings", path=tmp_path / "u.svg", options=options
        )
    assert "training accuracy (no held-out inputs)" in (tmp_path / "d.svg").read_text()
    assert "F_lin, epoch 2" in (tmp_path / "e.svg").read_text()
    assert "not trained" in (tmp_path / "u.svg").read_text()


def test_the_linear_model_orders_the_anchors_of_f_add():
    task = AdditionTask.of("add", ANCHORS, KEYS)
    data = generate(task, 5000, 0.2, seed=0)
    settings = SyntheticTrainingSettings(learning_rate=1e-3, epochs=10, records=[0, 10], seeds=(0,))
    record = train_addition(task, "linear", data, settings, np.unique(data.train_labels))
    initial, final = record.rows
    assert abs(initial["r_order"]) < 0.5 and final["r_order"] < -0.8
    assert final["train_accuracy"] > initial["train_accuracy"]


def test_the_stage_runs_in_snakemake(tmp_path):
    """Without a test split (the paper's data) and with the snapshot inside training."""
    write_config(
        tmp_path,
        {
            "synthetic": {
                "tasks": ["add", "mod"],
                "models": ["linear", "ffn"],
                "n_samples": 1000,
                "test_fraction": 0,
                "hidden_size": 16,
                "learning_rate": 1e-2,
                "epochs": 2,
                "records": 2,
                "seeds": [0, 1],
                "snapshot_epoch": 1,
                "shown_labels": {"add": 140, "mod": 110},
            },
        },
    )
    run_ok(tmp_path)
    results = tmp_path / "results/synthetic"
    summary = pl.read_csv(results / "summary.csv")
    assert summary.height == 4 and (summary["seeds"] == 2).all()
    assert {"r_order_mean", "r_order_sd", "alignment_label"} <= set(summary.columns)
    assert summary["test_accuracy"].is_nan().all() and (summary["train_accuracy"] > 0).all()
    table = pl.read_csv(results / "add/linear/r_order.csv")
    assert table.columns == ["epoch", "seed", "r_order", "train_accuracy", "test_accuracy"]
    assert sorted(table["epoch"].unique()) == [0, 1, 2]
    assert table["test_accuracy"].is_nan().all()
    with np.load(results / "add/ffn/weights.npz") as weights:
        assert int(weights["snapshot_epoch"]) == 1 and list(weights["epochs"]) == [0, 1, 2]
    with np.load(results / "add/data.npz") as data:
        assert data["test_inputs"].shape == (0, 3)
    with np.load(results / "add/signatures.npz") as found:
        assert str(found["signature_inputs"]) == "all"
        assert (found["context"][np.arange(10), found["anchors"]] == 1.0).all()
    for name in SYNTHETIC_FIGURES:
        assert (results / f"{name}.svg").stat().st_size > 1000
    signature_table = pl.read_csv(results / "mod/signatures.csv")
    assert signature_table.height == 3 and "cosine_spread" in signature_table.columns
    comparison = pl.read_csv(results / "paper_comparison.csv")
    assert comparison.columns == list(COMPARISON_SCHEMA)
    assert comparison.height == 10 and set(comparison["task"]) == {"add", "mod"}
