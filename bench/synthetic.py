"""Training speed of Yao & Xu's addition-task models (``layerlaws.synthetic.models``)
against autograd over a bag-of-tokens product, on the paper's setting.

Both train F_lin and F_ffn on f_add with the paper's data and schedule (50,000 pairs,
batches of 100, d = 200, N(0, d^-0.8), AdamW at 1e-5) for three seeds stacked, from the
same initial weights in the same data order, for ``--epochs`` epochs (500 steps each) on
one thread: the stage (gathered embedding rows, the backward pass by hand, fused AdamW)
and the reference (each input a row of token counts times W_E, autograd, PyTorch's
default AdamW). The weights of the two must agree to float32 rounding.

    .venv/bin/python bench/synthetic.py [--epochs 3]

Last line: ``synthetic_step_ms=<ours> vs_autograd=<reference / ours> paper_schedule_
cpu_hours=<the six models' 1,000 epochs at the stage's speed, one core>``.
"""

from __future__ import annotations

import argparse
import logging
import time

import numpy as np
import torch

from layerlaws.synthetic.models import epoch_order, initial_embeddings, train_addition
from layerlaws.synthetic.settings import SyntheticTrainingSettings
from layerlaws.synthetic.tasks import AdditionData, AdditionTask, generate

PAPER_EPOCHS = 1000
MODELS = ("linear", "ffn")
TASKS_TIMES_MODELS = 6


def reference(
    model: str, settings: SyntheticTrainingSettings, task: AdditionTask, data: AdditionData
) -> tuple[float, torch.Tensor]:
    """Seconds and final W_E of autograd over a bag-of-tokens product (the stage's own
    data order and initial weights)."""
    seeds = list(settings.seeds)
    embedding, unembedding = initial_embeddings(
        seeds, task.vocab_size, settings.hidden_size, settings.init_exponent
    )
    embedding.requires_grad_(True)
    unembedding.requires_grad_(True)
    optimizer = torch.optim.AdamW(
        [embedding, unembedding], lr=settings.learning_rate, weight_decay=settings.weight_decay
    )
    counts = np.zeros((len(data.train_inputs), task.vocab_size), dtype=np.float32)
    np.add.at(counts, (np.arange(len(counts))[:, None], data.train_inputs), 1.0)
    counts, labels = torch.from_numpy(counts), torch.from_numpy(data.train_labels)
    steps = len(labels) // settings.batch_size
    started = time.perf_counter()
    for epoch in range(1, settings.epochs + 1):
        order = epoch_order(seeds, epoch, len(labels))
        for step in range(steps):
            batch = order[:, step * settings.batch_size : (step + 1) * settings.batch_size]
            summed = torch.bmm(counts[batch], embedding)
            hidden = torch.relu(summed) if model == "ffn" else summed
            scores = torch.bmm(hidden, unembedding.transpose(1, 2))
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
    return time.perf_counter() - started, embedding.detach()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--epochs", type=int, default=3)
    epochs = parser.parse_args().epochs
    logging.basicConfig(level=logging.WARNING)
    torch.set_num_threads(1)
    task = AdditionTask.of("add", (11, 20), (101, 140))
    data = generate(task, 50000, 0.0, seed=0)
    settings = SyntheticTrainingSettings(epochs=epochs, records=[epochs], snapshot_epoch=epochs)
    steps = epochs * (len(data.train_labels) // settings.batch_size)
    ours_total = theirs_total = 0.0
    for model in MODELS:
        started = time.perf_counter()
        record = train_addition(task, model, data, settings, np.unique(data.train_labels))
        ours = time.perf_counter() - started
        theirs, embedding = reference(model, settings, task, data)
        anchors = embedding[:, list(task.anchors)].double().numpy()
        difference = float(np.abs(record.anchor_embeddings[-1] - anchors).max())
        print(
            f"{model:6s} stage {ours / steps * 1e3:6.3f} ms/step, autograd "
            f"{theirs / steps * 1e3:6.3f} ms/step; anchor embeddings after {epochs} epochs "
            f"differ by {difference:.1e} at most"
        )
        ours_total, theirs_total = ours_total + ours, theirs_total + theirs
    step_ms = ours_total / (len(MODELS) * steps) * 1e3
    hours = step_ms / 1e3 * PAPER_EPOCHS * steps / epochs * TASKS_TIMES_MODELS / 3600
    print(
        f"synthetic_step_ms={step_ms:.3f} vs_autograd={theirs_total / ours_total:.2f} "
        f"paper_schedule_cpu_hours={hours:.2f}"
    )


if __name__ == "__main__":
    main()
