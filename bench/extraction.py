"""Benchmark: the equi-learning pass (statistics accumulated while the model runs) against a
bare forward pass of the same model over the same batches in the same dtype, outputs
discarded; on SmolLM2 (after `make run`) and on a randomly initialised ~1B-parameter
Llama-style model built from a config (random token ids).

Every measurement runs in a fresh process, so its peak resident memory is its own. The
pass is measured with the paper's norm alone and with all three norms. On SmolLM2 it is
also measured with the tokens doubled (the peak memory should not grow), and one pass
keeps its states so that every PR (layers, offsets, norms) can be compared with float64
``numpy.linalg.lstsq`` on the same rows (``bench/regression.py``'s reference). On SmolLM2
the pass is measured once more with the representation geometry besides
(``layerlaws.geometry``, its default settings: every quantity, CKA against the previous
and the last layer, float32 products), once with each observer's ``observe`` timed to say
where the time goes (a separate process: the timing synchronises the device), and once
with the geometry in float32 and in float64 products, to compare their tables. The pass
stops before the output layer when nothing observes the logits (as here), so the bare
forward is also timed without it (``logits_to_keep=1``).

On SmolLM2 the bare forward, the papers' pass and the pass with the geometry are measured
in ``ROUNDS`` rounds (each round the three in turn, so that a slow spell of the machine
slows all three), and each ratio is the median of the rounds'.

Usage: .venv/bin/python bench/extraction.py [device] [dtype]     (cpu float32 by default)
The last line: vs_bare_forward (SmolLM2, the papers' statistics under the paper's norm
alone: bare seconds / pass seconds, the median of the rounds), pr_max_abs_diff (SmolLM2,
every norm), peak_host_mb (that pass), output_mb (what the pass writes: pr.csv and
pass.json), with_geometry_vs_bare_forward (SmolLM2, the same pass with the geometry
besides, the median of the rounds), and each round's ratios (papers_runs, geometry_runs).
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
import tempfile
import time
from dataclasses import asdict
from pathlib import Path
from statistics import median

import numpy as np
import polars as pl
import torch
from peak_memory import peak_rss_mib

from layerlaws.core.atomic import write_csv, write_json
from layerlaws.core.dtypes import torch_dtype
from layerlaws.equilearning.statistics import EquilearningStatistics
from layerlaws.forward.kept_states import HiddenStates
from layerlaws.forward.kept_writer import extract_hidden_states
from layerlaws.forward.model_pass import (
    Batch,
    first_rows,
    length_sorted_batches,
    run_forward_pass,
    sequences_of,
)
from layerlaws.geometry.observer import GeometryObserver
from layerlaws.geometry.settings import GeometrySettings
from layerlaws.models.facts import model_facts, read_facts
from layerlaws.models.loading import load_model

SMOLLM2 = "results/models/smollm2-135m"
SMOLLM2_TOKENS = "results/tokens/smollm2-135m/wiki-science.parquet"
SMOLLM2_TEXTS = 100
OFFSETS, CONTROLS = [-1, 0, 1, 2], ["none", "shuffled_vocab"]
ALL_NORMS = ["model", "standardize", "none"]
BATCH_SIZE = 16
LLAMA_1B = {
    "vocab_size": 32000,
    "hidden_size": 2048,
    "intermediate_size": 5632,
    "num_hidden_layers": 18,
    "num_attention_heads": 32,
    "num_key_value_heads": 8,
    "max_position_embeddings": 2048,
}
LLAMA_SEQUENCES, LLAMA_LENGTH = 8, 128
ROUNDS = 3
SMOLLM2_ROUND = ("bare", "pass", "geometry")
"""What each round measures on SmolLM2, in turn."""


def model_and_tokens(name: str, texts_factor: int, dtype: str, device: str):
    """(model, facts, tokens) of ``smollm2`` or ``llama-1b``."""
    if name == "smollm2":
        tokens = pl.read_parquet(SMOLLM2_TOKENS)
        tokens = tokens.filter(pl.col("sentence_id") < SMOLLM2_TEXTS * texts_factor)
        return load_model(SMOLLM2, dtype, device), read_facts(SMOLLM2), tokens
    from transformers import AutoModelForCausalLM, LlamaConfig

    torch.manual_seed(0)
    model = AutoModelForCausalLM.from_config(LlamaConfig(**LLAMA_1B))
    model = model.to(device, torch_dtype(dtype)).eval().requires_grad_(False)
    generator = torch.Generator().manual_seed(0)
    count = LLAMA_SEQUENCES * texts_factor
    ids = torch.randint(3, LLAMA_1B["vocab_size"], (count, LLAMA_LENGTH), generator=generator)
    tokens = pl.DataFrame(
        {
            "sentence_id": torch.arange(count).repeat_interleave(LLAMA_LENGTH).numpy(),
            "position": torch.arange(LLAMA_LENGTH).repeat(count).numpy().astype("int32"),
            "token_id": ids.flatten().numpy(),
            "is_special": [False] * (count * LLAMA_LENGTH),
        }
    )
    return model, model_facts(model, {"kind": "random", "config": LLAMA_1B}), tokens


@torch.inference_mode()
def bare_seconds(model, tokens: pl.DataFrame, device: str, head: bool = True) -> float:
    """The same padded batches through the model alone, outputs discarded; without
    ``head``, the output layer runs on the last position only (``logits_to_keep``)."""
    sequences = sequences_of(tokens)
    starts = first_rows(sequences)
    lengths = [len(sequence.token_ids) for sequence in sequences]
    batches = [
        Batch.of(sequences, indices, starts)
        for indices in length_sorted_batches(lengths, BATCH_SIZE)
    ]
    started = time.perf_counter()
    for batch in batches:
        model(
            input_ids=batch.input_ids.to(device),
            attention_mask=batch.attention_mask.to(device),
            use_cache=False,
            **({} if head else {"logits_to_keep": 1}),
        )
    if device.startswith("cuda"):
        torch.cuda.synchronize()
    return time.perf_counter() - started


def phase(kind: str, name: str, norms: list[str], factor: int, device: str, dtype: str) -> dict:
    """One measurement, in this process."""
    model, facts, tokens = model_and_tokens(name, factor, dtype, device)
    result = {"tokens": len(tokens)}
    if kind in ("bare", "blocks"):
        result["seconds"] = bare_seconds(model, tokens, device, head=kind == "bare")
    elif kind == "precision":
        observers = [
            GeometryObserver(GeometrySettings(product_dtype=dtype), facts.num_layers)
            for dtype in ("float32", "float64")
        ]
        run_forward_pass(model, facts, tokens, observers, BATCH_SIZE, device, progress=False)
        result["differences"] = relative_differences(*(o.table() for o in observers))
    elif kind in ("pass", "geometry", "timed"):
        statistics = EquilearningStatistics(facts, OFFSETS, norms, CONTROLS, shuffle_seed=0)
        observers = [statistics]
        if kind != "pass":
            observers.append(GeometryObserver(GeometrySettings(), facts.num_layers))
        if kind == "timed":
            result["observe_seconds"] = [timed(observer, device) for observer in observers]
        report = run_forward_pass(
            model, facts, tokens, observers, BATCH_SIZE, device, progress=False
        )
        table = statistics.table()
        with tempfile.TemporaryDirectory() as name:
            folder = Path(name)
            write_csv(folder / "pr.csv", table)
            write_json(folder / "pass.json", {**asdict(facts), **report})
            result["output_bytes"] = sum(path.stat().st_size for path in folder.iterdir())
        result["seconds"] = report["seconds"]
        result["pr"] = table.rows()
    else:
        folder = Path(tempfile.mkdtemp()) / "hidden"
        extract_hidden_states(
            model,
            facts,
            tokens,
            out_folder=folder,
            batch_size=BATCH_SIZE,
            device=device,
            progress=False,
        )
        result["folder"] = str(folder)
        result["hidden_bytes"] = sum(p.stat().st_size for p in folder.rglob("*.npy"))
    result["peak_mb"] = peak_rss_mib()
    return result


def relative_differences(found: pl.DataFrame, expected: pl.DataFrame) -> dict[str, float]:
    """Each measured column's largest |found − expected| / |expected| (NaN rows left out)."""
    differences = {}
    for column in expected.columns[3:]:
        exact = expected[column].to_numpy()
        finite = np.isfinite(exact)
        error = np.abs(found[column].to_numpy()[finite] - exact[finite]) / np.abs(exact[finite])
        differences[column] = float(error.max())
    return differences


def timed(observer, device: str) -> list[float]:
    """Wrap ``observer.observe`` to add its seconds (the device synchronised before and
    after) to the returned one-element list."""
    seconds, observe = [0.0], observer.observe

    def synchronised() -> float:
        if device.startswith("cuda"):
            torch.cuda.synchronize()
        return time.perf_counter()

    def timed_observe(layer, states):
        started = synchronised()
        observe(layer, states)
        seconds[0] += synchronised() - started

    observer.observe = timed_observe
    return seconds


def measured(kind: str, name: str, norms: list[str], factor: int, device: str, dtype: str):
    """``phase`` in a fresh process."""
    arguments = [kind, name, ",".join(norms), str(factor), device, dtype]
    output = subprocess.run(
        [sys.executable, __file__, "--phase", *arguments],
        check=True,
        capture_output=True,
        text=True,
    ).stdout
    return json.loads(output.strip().splitlines()[-1])


def pr_difference(smollm2_pass: dict, device: str, dtype: str) -> float:
    """Largest |PR − float64 lstsq| over every layer, offset and norm (control none)."""
    sys.path.insert(0, str(Path(__file__).parent))
    from regression import reference

    states = measured("states", "smollm2", [], 1, device, dtype)
    hidden = HiddenStates.open(states["folder"])
    ours = {
        (layer, offset, norm): pr
        for layer, offset, norm, control, pr, _ in smollm2_pass["pr"]
        if control == "none"
    }
    difference = max(
        abs(ours[(layer, offset, norm)] - value)
        for norm in ALL_NORMS
        for (layer, offset), value in reference(hidden, norm).items()
    )
    shutil.rmtree(Path(states["folder"]).parent)  # the states' temporary folder, 1.5 GB
    return difference


def main() -> None:
    device = sys.argv[1] if len(sys.argv) > 1 else "cpu"
    dtype = sys.argv[2] if len(sys.argv) > 2 else "float32"
    if not Path(SMOLLM2_TOKENS).is_file():
        sys.exit(f"no {SMOLLM2_TOKENS}: run `make run` first")
    rounds = [
        [measured(kind, "smollm2", ["model"], 1, device, dtype) for kind in SMOLLM2_ROUND]
        for _ in range(ROUNDS)
    ]
    papers_runs = [bare["seconds"] / ours["seconds"] for bare, ours, _ in rounds]
    geometry_runs = [bare["seconds"] / geometry["seconds"] for bare, _, geometry in rounds]
    lines = {("smollm2", "bare"): rounds[0][0], ("smollm2", 1): rounds[0][1]}
    for name in ("smollm2", "llama-1b"):
        bare = lines.get((name, "bare")) or measured("bare", name, [], 1, device, dtype)
        for norms in (["model"], ALL_NORMS):
            ours = lines.get((name, len(norms))) or measured("pass", name, norms, 1, device, dtype)
            lines[name, len(norms)] = ours
            print(
                f"{name:9s} {bare['tokens']:6d} tokens, norms {','.join(norms):24s} "
                f"bare {bare['seconds']:7.1f} s ({bare['peak_mb']:6.0f} MB)   "
                f"pass {ours['seconds']:7.1f} s ({ours['peak_mb']:6.0f} MB)   "
                f"ratio {bare['seconds'] / ours['seconds']:.2f}"
            )
        lines[name, "bare"] = bare
    doubled = measured("pass", "smollm2", ["model"], 2, device, dtype)
    single = lines["smollm2", 1]
    bare = lines["smollm2", "bare"]["seconds"]
    blocks = measured("blocks", "smollm2", [], 1, device, dtype)["seconds"]
    print(
        f"smollm2 bare forward without its output layer: {blocks:.1f} s (the pass stops "
        f"before it: nothing observes the logits), ratio of the papers' pass to it "
        f"{blocks / single['seconds']:.2f}"
    )
    geometry = rounds[0][2]
    print(
        f"smollm2 pass with the geometry besides: {geometry['seconds']:.1f} s "
        f"({geometry['peak_mb']:.0f} MB), ratio {bare / geometry['seconds']:.2f} (to the "
        f"forward without its output layer {blocks / geometry['seconds']:.2f})"
    )
    for number, (bare_run, ours, with_geometry) in enumerate(rounds, 1):
        print(
            f"round {number}: bare {bare_run['seconds']:.1f} s, papers' pass "
            f"{ours['seconds']:.1f} s (ratio {papers_runs[number - 1]:.2f}), with the geometry "
            f"{with_geometry['seconds']:.1f} s (ratio {geometry_runs[number - 1]:.2f})"
        )
    precision = measured("precision", "smollm2", [], 1, device, dtype)["differences"]
    worst = max(precision, key=precision.get)
    print(
        f"geometry with float32 products against float64 ones, largest relative difference: "
        f"{precision[worst]:.1e} ({worst}; "
        + ", ".join(f"{name} {value:.0e}" for name, value in precision.items() if name != worst)
        + ")"
    )
    split = measured("timed", "smollm2", ["model"], 1, device, dtype)
    statistics_seconds, geometry_seconds = (s[0] for s in split["observe_seconds"])
    model_seconds = split["seconds"] - statistics_seconds - geometry_seconds
    print(
        f"where that pass's {split['seconds']:.1f} s go (observe timed): model and batching "
        f"{model_seconds:.1f} s, papers' statistics {statistics_seconds:.1f} s, geometry "
        f"{geometry_seconds:.1f} s"
    )
    print(
        f"smollm2 pass with {single['tokens']} tokens: peak {single['peak_mb']:.0f} MB; with "
        f"{doubled['tokens']}: peak {doubled['peak_mb']:.0f} MB"
    )
    difference = pr_difference(lines["smollm2", 3], device, dtype)
    print(
        f"largest |PR − float64 lstsq| on SmolLM2 states, every layer, offset and norm: "
        f"{difference:.3e}"
    )
    print(
        f"vs_bare_forward={median(papers_runs):.2f} "
        f"pr_max_abs_diff={difference:.3e} peak_host_mb={single['peak_mb']:.0f} "
        f"output_mb={single['output_bytes'] / 2**20:.3f} "
        f"with_geometry_vs_bare_forward={median(geometry_runs):.2f} "
        f"papers_runs={','.join(f'{r:.2f}' for r in papers_runs)} "
        f"geometry_runs={','.join(f'{r:.2f}' for r in geometry_runs)}"
    )


if __name__ == "__main__":
    if len(sys.argv) > 1 and sys.argv[1] == "--phase":
        kind, name, norms, factor, device, dtype = sys.argv[2:8]
        print(
            json.dumps(
                phase(kind, name, [n for n in norms.split(",") if n], int(factor), device, dtype)
            )
        )
    else:
        main()
