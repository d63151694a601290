"""Training throughput of the training stage against a bare PyTorch loop.

Both train the default config's model (``training.wiki-llama`` of config.yaml: a 4-layer,
64-wide Llama with SmolLM2's 49,152-token vocabulary) from the same initial weights on the
same packed Wikipedia sequences in the same order, with the same batch size and AdamW
settings, for the same number of steps. The stage (``layerlaws.training.train.train``) also
does what it does in the pipeline: learning-rate schedule, gradient clipping, held-out
evaluation every ``eval_every`` steps (50, as configured) and checkpoints (here at the
middle and the end), over 200 steps; the bare loop only steps the optimizer. Tokens per
second count training tokens only.

The bare loop is what a tuned PyTorch loop does on the device: the fused AdamW where the
device has it (``train.optimizer_of``, as the stage), transformers' scaled-dot-product
attention, bfloat16 autocast on a GPU, no host synchronisation between steps. A third,
shorter run of the bare loop times each part of a step (the device synchronised between
them): reading the batch, forward, backward, and the optimizer (clipping and AdamW).

Run after ``make run`` (it needs the prepared SmolLM2 tokenizer):
    .venv/bin/python bench/training.py
The stage's steps are timed without its evaluations and saves (``TrainingRun``
records their seconds); the whole job's ratio is printed beside them.
Last line: ``train_step_vs_bare_loop=<ours / bare> tokens_per_s=<ours>
model_tflops=<6 · parameters · tokens/s, 10¹² FLOP/s>`` and, on a GPU of a known peak,
``mfu=<that / its bfloat16 peak>``.
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
SPLIT_STEPS = 30
TEXTS = 3000
PEAK_BF16_FLOPS = {"H100": 989e12, "H200": 989e12, "A100": 312e12}
"""Dense bfloat16 peaks of GPUs (NVIDIA's data sheets, SXM), by a part of the device's name."""
PARTS = ("data", "forward", "backward", "optimizer")


def bare_loop(spec: TrainingSpec, config, sequences, device: str, split: bool = False):
    """Seconds for ``spec.steps`` plain AdamW steps on the same batches (gradients clipped,
    as the stage does); with ``split``, also the seconds of each of ``PARTS`` summed over
    the steps, the device synchronised between them."""
    model = initial_model(spec, config).to(device).train()
    optimizer = optimizer_of(spec, model)
    data = torch.from_numpy(sequences)
    seconds = dict.fromkeys(PARTS, 0.0)
    autocast = torch.autocast("cuda", dtype=torch.bfloat16, enabled=device.startswith("cuda"))

    def mark(part: str | None, since: float) -> float:
        if not split:
            return since
        if device.startswith("cuda"):
            torch.cuda.synchronize()
        now = time.perf_counter()
        if part:
            seconds[part] += now - since
        return now

    started = time.perf_counter()
    for step in range(spec.steps):
        since = mark(None, 0.0)
        batch = data[batch_indices(len(data), spec, step)].to(device, torch.int64)
        since = mark("data", since)
        with autocast:
            loss = model(input_ids=batch, labels=batch).loss
        since = mark("forward", since)
        loss.backward()
        since = mark("backward", since)
        torch.nn.utils.clip_grad_norm_(model.parameters(), spec.grad_clip)
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
        mark("optimizer", since)
    if device.startswith("cuda"):
        torch.cuda.synchronize()
    return time.perf_counter() - started, seconds


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
    bare_seconds, _ = bare_loop(spec, config, sequences, device)
    with tempfile.TemporaryDirectory() as folder:
        run = train(
            spec, config, tokenizer, sequences, held_out=held_out, folder=folder, device=device
        )
    steps_seconds = run.seconds - run.evaluation_seconds - run.saving_seconds
    bare_rate, ours_rate = tokens / bare_seconds, tokens / run.seconds
    step_rate = tokens / steps_seconds
    print(f"bare loop:  {bare_seconds:7.2f} s  {bare_rate:8.0f} tokens/s")
    evaluated = {s for s in range(1, STEPS + 1) if s % spec.eval_every == 0} | {STEPS // 2}
    print(
        f"stage:      {run.seconds:7.2f} s  {ours_rate:8.0f} tokens/s (with {len(evaluated)} "
        f"held-out evaluations of {len(held_out)} sequences, {run.evaluation_seconds:.2f} s, "
        f"and 2 checkpoints, {run.saving_seconds:.2f} s)"
    )
    print(
        f"its steps:  {steps_seconds:7.2f} s  {step_rate:8.0f} tokens/s "
        f"(job_vs_bare_loop={ours_rate / bare_rate:.2f})"
    )
    short = TrainingSpec.of(settings | {"steps": SPLIT_STEPS, "checkpoints": [0, SPLIT_STEPS]})
    _, parts = bare_loop(short, config, sequences, device, split=True)
    step_ms = sum(parts.values()) / SPLIT_STEPS * 1e3
    shares = ", ".join(
        f"{part} {seconds / sum(parts.values()):.1%}" for part, seconds in parts.items()
    )
    print(
        f"a step of the bare loop ({SPLIT_STEPS} steps, synchronised): {step_ms:.0f} ms: {shares}"
    )
    parameters = sum(p.numel() for p in initial_model(spec, config).parameters())
    flops = 6 * parameters * step_rate
    line = (
        f"train_step_vs_bare_loop={step_rate / bare_rate:.2f} tokens_per_s={step_rate:.0f} "
        f"model_tflops={flops / 1e12:.3f}"
    )
    if device.startswith("cuda"):
        name = torch.cuda.get_device_name()
        peak = next((value for key, value in PEAK_BF16_FLOPS.items() if key in name), None)
        line += f" mfu={flops / peak:.3f}" if peak else f" mfu=unknown ({name})"
    print(line)


if __name__ == "__main__":
    main()
