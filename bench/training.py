"""Training throughput of the training stage against a bare PyTorch loop.

Both train the default config's model (``training.wiki-llama`` of config.yaml: a 4-layer,
64-wide Llama with SmolLM2's 49,152-token vocabulary) from the same initial weights on the
same packed Wikipedia sequences in the same order, with the same batch size and AdamW
settings, for the same number of steps. The stage (``layerlaws.training.train.train``) also
does what it does in the pipeline: learning-rate schedule, gradient clipping, held-out
evaluation every ``eval_every`` steps (50, as configured) and checkpoints (here at the
middle and the end), over 200 steps; the bare loop only steps the optimizer. Tokens per
second count training tokens only.

Run after ``make run`` (it needs the prepared SmolLM2 tokenizer):
    .venv/bin/python bench/training.py
Last line: ``vs_bare_loop=<ours / bare> tokens_per_s=<ours>``.
"""

from __future__ import annotations

import logging
import sys
import tempfile
import time
from pathlib import Path

import torch
import yaml
from snakemake.utils import validate

from layerlaws.core.settings import SCHEMA_FILE
from layerlaws.models.loading import load_tokenizer
from layerlaws.text.sources import wikipedia_summaries
from layerlaws.training.plan import TrainingSpec, batch_indices
from layerlaws.training.train import initial_model, model_config, optimizer_of, packed_texts, train

REPO = Path(__file__).resolve().parent.parent
STEPS = 200
TEXTS = 3000


def bare_loop(spec: TrainingSpec, config, sequences, device: str) -> float:
    """Seconds for ``spec.steps`` plain AdamW steps on the same batches."""
    model = initial_model(spec, config).to(device).train()
    optimizer = optimizer_of(spec, model)
    data = torch.from_numpy(sequences)
    started = time.perf_counter()
    for step in range(spec.steps):
        batch = data[batch_indices(len(data), spec, step)].to(device)
        loss = model(input_ids=batch, labels=batch).loss
        loss.backward()
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
    if device.startswith("cuda"):
        torch.cuda.synchronize()
    return time.perf_counter() - started


def main() -> None:
    logging.basicConfig(level=logging.WARNING)
    config_file = yaml.safe_load((REPO / "config.yaml").read_text())
    validate(config_file, str(SCHEMA_FILE))  # fills the defaults
    settings = config_file["training"]["wiki-llama"]
    spec = TrainingSpec.of(settings | {"steps": STEPS, "checkpoints": [0, STEPS // 2, STEPS]})
    tokenizer_folder = REPO / "results/models/smollm2-135m"
    if not tokenizer_folder.is_dir():
        sys.exit("run `make run` first: the benchmark uses the prepared SmolLM2 tokenizer")
    tokenizer = load_tokenizer(tokenizer_folder)
    texts = [text for text, _ in wikipedia_summaries({})]
    sequences = packed_texts(tokenizer, texts[:TEXTS], spec.context)
    held_out = packed_texts(tokenizer, texts[-200:], spec.context)[: spec.held_out_sequences]
    device = "cuda" if torch.cuda.is_available() else "cpu"
    config = model_config(spec, tokenizer)
    tokens = spec.tokens_seen(STEPS)
    print(
        f"model: {spec.architecture}, {spec.num_layers} layers, hidden {spec.hidden_size}, "
        f"vocabulary {len(tokenizer)}; {STEPS} steps of {spec.batch_size} x {spec.context} "
        f"tokens on {device} ({torch.get_num_threads()} threads)"
    )
    bare_seconds = bare_loop(spec, config, sequences, device)
    with tempfile.TemporaryDirectory() as folder:
        run = train(
            spec, config, tokenizer, sequences, held_out=held_out, folder=folder, device=device
        )
    ours_seconds = run.seconds
    bare_rate, ours_rate = tokens / bare_seconds, tokens / ours_seconds
    print(f"bare loop:  {bare_seconds:7.2f} s  {bare_rate:8.0f} tokens/s")
    evaluated = {s for s in range(1, STEPS + 1) if s % spec.eval_every == 0} | {STEPS // 2}
    print(
        f"stage:      {ours_seconds:7.2f} s  {ours_rate:8.0f} tokens/s (with {len(evaluated)} "
        f"held-out evaluations of {len(held_out)} sequences and 2 checkpoints)"
    )
    print(f"vs_bare_loop={ours_rate / bare_rate:.2f} tokens_per_s={ours_rate:.0f}")


if __name__ == "__main__":
    main()
