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


def bag_of_tokens(inputs: np.ndarray, vocab_size: int) -> torch.Tensor:
    """How often each token occurs in each input: (n, vocab) float32, so that Σ_{x∈X} W_E[x]
    is one matrix product (faster on a CPU than gathering rows and scattering their
    gradients back)."""
    counts = np.zeros((len(inputs), vocab_size), dtype=np.float32)
    np.add.at(counts, (np.arange(len(inputs))[:, None], inputs), 1.0)
    return torch.from_numpy(counts)


def logits(
    model: str, embedding: torch.Tensor, unembedding: torch.Tensor, counts: torch.Tensor
) -> torch.Tensor:
    """Logits (seeds, n, vocab) of inputs given as token counts (seeds, n, vocab) under
    stacked weights (seeds, vocab, d)."""
    summed = torch.bmm(counts, embedding)
    hidden = torch.relu(summed) if model == "ffn" else summed
    return torch.bmm(hidden, unembedding.transpose(1, 2))


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
    counts = bag_of_tokens(distinct, embedding.shape[1])[None].expand(embedding.shape[0], -1, -1)
    with torch.no_grad():
        predicted = logits(model, embedding, unembedding, counts).argmax(dim=2).numpy()
    return ((predicted == distinct_labels[None]) * weight[None]).sum(axis=1) / len(inputs)


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
    embedding.requires_grad_(True)
    unembedding.requires_grad_(True)
    optimizer = torch.optim.AdamW(
        [embedding, unembedding], lr=settings.learning_rate, weight_decay=settings.weight_decay
    )
    counts = bag_of_tokens(data.train_inputs, task.vocab_size)
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
        record.label_unembeddings.append(unembedding[:, label_domain].detach().double().numpy())
        record.epochs.append(epoch)

    if 0 in recorded:
        observe(0)
    steps = len(labels) // settings.batch_size
    for epoch in range(1, settings.epochs + 1):
        order = torch.stack(
            [
                torch.from_numpy(np.random.default_rng((seed, epoch)).permutation(len(labels)))
                for seed in seeds
            ]
        )
        for step in range(steps):
            batch = order[:, step * settings.batch_size : (step + 1) * settings.batch_size]
            scores = logits(model, embedding, unembedding, counts[batch])
            # Sum over seeds of each seed's mean loss: each seed's gradient is its own.
            loss = (
                torch.nn.functional.cross_entropy(
                    scores.flatten(0, 1), labels[batch].flatten(), reduction="none"
                )
                .view(len(seeds), -1)
                .mean(dim=1)
                .sum()
            )
            optimizer.zero_grad(set_to_none=True)
            loss.backward()
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
