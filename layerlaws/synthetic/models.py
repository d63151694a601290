"""The embedding models of the addition tasks (Yao & Xu, §3 and Appendix A),
trained for several seeds at once.

- ``linear``: F_lin(X) = W_U Σ_{x∈X} W_E[x];
- ``ffn``: F_ffn(X) = W_U σ(Σ_{x∈X} W_E[x]), σ = ReLU;
with W_E, W_U (vocab, d), every entry drawn from N(0, d^−γ) (γ = 0.8 in the paper: a small
initialisation), cross-entropy on the label, AdamW, mini-batches. The seeds' models are
independent: their weights are stacked (seeds, vocab, d) and trained together, each with
its own initialisation and its own data order (a permutation per epoch seeded by (seed,
epoch)); AdamW acts element by element, so this is exactly one optimizer per seed.
At log-spaced epochs and at the snapshot epoch (the paper's PCA figures show epoch 120)
each seed's training and test accuracy (NaN without test inputs), R_order of cos(W_E)
over the anchors and the weights of the anchors and labels are recorded. Float32 on the CPU,
deterministic for a seed.

A step costs three products of (batch × d × vocab) per seed, written out by hand
(``loss_gradients``): the inputs' three embedding rows are gathered and their gradients
added back, and autograd's bookkeeping, which costs as much again as the products on
these small matrices, is skipped; with PyTorch's fused AdamW a step of the paper's setting
(3 seeds, batch 100, d = 200, 181 tokens) takes about half the time of autograd over a
bag-of-tokens product (``bench/synthetic.py``).
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np
import torch

from layerlaws.core.geometry import cosine_matrix
from layerlaws.synthetic.settings import SyntheticTrainingSettings
from layerlaws.synthetic.tasks import AdditionData, AdditionTask, r_order
from layerlaws.training.plan import checkpoint_steps

log = logging.getLogger(__name__)


def initial_embeddings(
    seeds: Sequence[int], vocab_size: int, hidden_size: int, init_exponent: float
) -> tuple[torch.Tensor, torch.Tensor]:
    """W_E and W_U, each (seeds, vocab, d) float32, entries N(0, d^−γ), seeded per seed."""
    scale = hidden_size ** (-init_exponent / 2)
    stacked = []
    for seed in seeds:
        generator = torch.Generator().manual_seed(seed)
        stacked.append(torch.randn(2, vocab_size, hidden_size, generator=generator) * scale)
    weights = torch.stack(stacked)
    return weights[:, 0].contiguous(), weights[:, 1].contiguous()


def embedding_rows(inputs: torch.Tensor, vocab_size: int) -> torch.Tensor:
    """The rows of stacked weights (seeds, vocab, d) seen as one (seeds · vocab, d) matrix
    that ``inputs`` (seeds, n, 3) token ids pick, flattened (seeds · n · 3,)."""
    return (inputs + vocab_size * torch.arange(inputs.shape[0])[:, None, None]).reshape(-1)


def summed_embeddings(embedding: torch.Tensor, inputs: torch.Tensor) -> torch.Tensor:
    """Σ_{x∈X} W_E[x] of each input: ``inputs`` (seeds, n, 3) token ids (a token twice in X
    counts twice), ``embedding`` (seeds, vocab, d) stacked → (seeds, n, d)."""
    seeds, vocab, width = embedding.shape
    gathered = embedding.reshape(seeds * vocab, width).index_select(
        0, embedding_rows(inputs, vocab)
    )
    return gathered.view(*inputs.shape, width).sum(dim=2)


def logits(
    model: str, embedding: torch.Tensor, unembedding: torch.Tensor, inputs: torch.Tensor
) -> torch.Tensor:
    """Logits (seeds, n, vocab) of ``inputs`` (seeds, n, 3) under stacked weights (seeds,
    vocab, d)."""
    summed = summed_embeddings(embedding, inputs)
    hidden = torch.relu(summed) if model == "ffn" else summed
    return torch.bmm(hidden, unembedding.transpose(1, 2))


@torch.no_grad()
def loss_gradients(
    model: str,
    embedding: torch.Tensor,
    unembedding: torch.Tensor,
    inputs: torch.Tensor,
    labels: torch.Tensor,
) -> tuple[torch.Tensor, torch.Tensor]:
    """The gradients with respect to W_E and W_U (each (seeds, vocab, d)) of the sum over
    seeds of each seed's mean cross-entropy on its batch (``inputs`` (seeds, b, 3),
    ``labels`` (seeds, b)), by hand: with h the summed embeddings (through the ReLU for
    F_ffn), P the softmax of the logits h W_Uᵀ and G = (P − onehot(y)) / b, ∂/∂W_U = Gᵀ h
    and ∂/∂h = G W_U, which (where the ReLU's input is positive, for F_ffn) is added to the
    W_E row of each of the input's tokens."""
    seeds, vocab, width = embedding.shape
    batch = inputs.shape[1]
    summed = summed_embeddings(embedding, inputs)
    hidden = torch.relu(summed) if model == "ffn" else summed
    error = torch.softmax(torch.bmm(hidden, unembedding.transpose(1, 2)), dim=2)
    error.view(seeds * batch, vocab)[torch.arange(seeds * batch), labels.reshape(-1)] -= 1.0
    error /= batch
    unembedding_gradient = torch.bmm(error.transpose(1, 2), hidden)
    hidden_gradient = torch.bmm(error, unembedding)
    if model == "ffn":
        hidden_gradient *= summed > 0
    spread = hidden_gradient.unsqueeze(2).expand(seeds, batch, 3, width).reshape(-1, width)
    rows = embedding_rows(inputs, vocab)
    embedding_gradient = embedding.new_zeros(seeds * vocab, width).index_add_(0, rows, spread)
    return embedding_gradient.view(seeds, vocab, width), unembedding_gradient


def accuracy(
    model: str,
    embedding: torch.Tensor,
    unembedding: torch.Tensor,
    inputs: np.ndarray,
    labels: np.ndarray,
) -> np.ndarray:
    """Share of ``inputs`` (n, 3) whose largest logit is the label, per seed (seeds,); NaN
    when there are no inputs (no test set). Each distinct input is evaluated once and
    weighted by how often it occurs (the training set draws 50,000 inputs from a few
    thousand)."""
    if len(inputs) == 0:
        return np.full(embedding.shape[0], np.nan)
    distinct, index, weight = np.unique(inputs, axis=0, return_inverse=True, return_counts=True)
    distinct_labels = np.zeros(len(distinct), dtype=np.int64)
    distinct_labels[index.ravel()] = labels
    stacked = torch.from_numpy(distinct)[None].expand(embedding.shape[0], -1, -1)
    with torch.no_grad():
        predicted = logits(model, embedding, unembedding, stacked).argmax(dim=2).numpy()
    return ((predicted == distinct_labels[None]) * weight[None]).sum(axis=1) / len(inputs)


def epoch_order(seeds: Sequence[int], epoch: int, n_samples: int) -> torch.Tensor:
    """(seeds, n_samples) int64: each seed's order of the training samples in ``epoch``, a
    permutation seeded by (seed, epoch)."""
    return torch.stack(
        [
            torch.from_numpy(np.random.default_rng((seed, epoch)).permutation(n_samples))
            for seed in seeds
        ]
    )


@dataclass
class TrainingRecord:
    """What is recorded at the recorded epochs, one entry per epoch."""

    rows: list[dict[str, float | int]] = field(default_factory=list)
    """``epoch``, ``seed``, ``r_order``, ``train_accuracy``, ``test_accuracy``."""
    anchor_embeddings: list[np.ndarray] = field(default_factory=list)
    """(seeds, |A|, d) per recorded epoch."""
    label_unembeddings: list[np.ndarray] = field(default_factory=list)
    """(seeds, labels, d) per recorded epoch, the label domain in order."""
    epochs: list[int] = field(default_factory=list)
    snapshot_epoch: int = 0
    """The recorded epoch whose weights the PCA figures show."""


def train_addition(
    task: AdditionTask,
    model: str,
    data: AdditionData,
    settings: SyntheticTrainingSettings,
    label_domain: np.ndarray,
) -> TrainingRecord:
    """Train ``model`` (``linear`` or ``ffn``) on ``data`` for every seed of ``settings``."""
    seeds = list(settings.seeds)
    embedding, unembedding = initial_embeddings(
        seeds, task.vocab_size, settings.hidden_size, settings.init_exponent
    )
    optimizer = torch.optim.AdamW(
        [embedding, unembedding],
        lr=settings.learning_rate,
        weight_decay=settings.weight_decay,
        fused=True,
    )
    inputs = torch.from_numpy(data.train_inputs)
    labels = torch.from_numpy(data.train_labels)
    recorded = {*checkpoint_steps(settings.records, settings.epochs), settings.snapshot}
    if settings.snapshot < settings.snapshot_epoch:
        log.warning(
            "synthetic: snapshot_epoch %d lies beyond the last epoch; the snapshot is epoch %d",
            settings.snapshot_epoch,
            settings.snapshot,
        )
    anchors = list(task.anchors)
    record = TrainingRecord(snapshot_epoch=settings.snapshot)

    def observe(epoch: int) -> None:
        with torch.no_grad():
            train_accuracy = accuracy(
                model, embedding, unembedding, data.train_inputs, data.train_labels
            )
            test_accuracy = accuracy(
                model, embedding, unembedding, data.test_inputs, data.test_labels
            )
            anchor_rows = embedding[:, anchors].double().numpy()
        for index, seed in enumerate(seeds):
            record.rows.append(
                {
                    "epoch": epoch,
                    "seed": seed,
                    "r_order": r_order(cosine_matrix(anchor_rows[index]), anchors),
                    "train_accuracy": float(train_accuracy[index]),
                    "test_accuracy": float(test_accuracy[index]),
                }
            )
        record.anchor_embeddings.append(anchor_rows)
        record.label_unembeddings.append(unembedding[:, label_domain].double().numpy())
        record.epochs.append(epoch)

    if 0 in recorded:
        observe(0)
    steps = len(labels) // settings.batch_size
    for epoch in range(1, settings.epochs + 1):
        order = epoch_order(seeds, epoch, len(labels))
        for step in range(steps):
            batch = order[:, step * settings.batch_size : (step + 1) * settings.batch_size]
            # Each seed's gradient is that of its own mean loss (loss_gradients).
            embedding.grad, unembedding.grad = loss_gradients(
                model, embedding, unembedding, inputs[batch], labels[batch]
            )
            optimizer.step()
        if epoch in recorded:
            observe(epoch)
            log.info(
                "%s %s epoch %d: train accuracy %s",
                task.kind,
                model,
                epoch,
                [round(row["train_accuracy"], 3) for row in record.rows[-len(seeds) :]],
            )
    return record
