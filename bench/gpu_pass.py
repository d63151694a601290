"""Benchmark for a GPU: the model pass against a bare forward, and a coupling product
against its floor, on a randomly initialised Qwen2 with Qwen2.5-1.5B's shapes (d = 1536,
28 blocks, 12 heads of 128, 2 key-value heads, MLP 8,960, its 151,936-token vocabulary)
in bfloat16: the largest model of the zoo's packages, whose products and forward passes
cost what the real model's do, with nothing to download.

- ``gpu_pass_vs_forward``: seconds of ``run_forward_pass`` feeding the default config's
  observers of the statistics (offsets −1, 0, 1, 2; norms model, standardize, none;
  controls none, shuffled_vocab; float64 co-moments on the GPU) and of the separation
  fuzziness, over ``TEXTS`` sequences of ``LENGTH`` random token ids (Zipf-distributed over
  ``ZIPF_VOCABULARY`` ids, as text is) in batches of ``BATCH``, divided by the seconds of
  the same batches through ``model(input_ids, attention_mask)`` alone. Each the best of
  two runs after a warm-up.
- ``gpu_coupling_product_vs_floor``: seconds per token-local Jacobian product of the
  middle block at the last token of a ``PROMPT_LENGTH``-token prompt (the depth Jacobian
  formed by d VJPs, as ``coupling.svd: full`` does), divided by the seconds per product of
  the same batched VJPs through the block run on that token alone (``bench/jacobian.py``'s
  floor).

Usage: python bench/gpu_pass.py [--device cuda] [--small]
(``--small``: a d = 64, 4-block model and fewer texts, to check the script on a CPU.)
The last line: gpu_pass_vs_forward=… gpu_coupling_product_vs_floor=…
"""

from __future__ import annotations

import argparse
import time

import numpy as np
import polars as pl
import torch
from jacobian import best_of, floor_seconds, local_product_seconds
from transformers import Qwen2Config, Qwen2ForCausalLM

from layerlaws.equilearning.fuzziness import FuzzinessClasses, SeparationFuzziness
from layerlaws.equilearning.statistics import EquilearningStatistics, present_ids
from layerlaws.forward.model_pass import length_sorted_batches, run_forward_pass
from layerlaws.models.facts import model_facts

SHAPES = {
    "qwen2.5-1.5b": {
        "vocab_size": 151936,
        "hidden_size": 1536,
        "intermediate_size": 8960,
        "num_hidden_layers": 28,
        "num_attention_heads": 12,
        "num_key_value_heads": 2,
    },
    "small": {
        "vocab_size": 2000,
        "hidden_size": 64,
        "intermediate_size": 128,
        "num_hidden_layers": 4,
        "num_attention_heads": 4,
        "num_key_value_heads": 2,
    },
}
TEXTS, LENGTH, BATCH = 256, 512, 16
ZIPF_VOCABULARY = 32_000
PROMPT_LENGTH = 32
VJP_CHUNK = 64
OFFSETS, NORMS, CONTROLS = (
    (-1, 0, 1, 2),
    ("model", "standardize", "none"),
    ("none", "shuffled_vocab"),
)


def random_model(shape: dict, device: str, dtype: torch.dtype) -> torch.nn.Module:
    """The randomly initialised Qwen2 of ``shape`` (seed 0), eager attention."""
    torch.manual_seed(0)
    config = Qwen2Config(**shape, tie_word_embeddings=True, attn_implementation="eager")
    return Qwen2ForCausalLM(config).to(device=device, dtype=dtype).eval()


def zipf_tokens(texts: int, length: int, vocabulary: int) -> pl.DataFrame:
    """A tokens table of ``texts`` sequences of ``length`` ids drawn with probability ∝
    1/rank from ``vocabulary`` ids (seed 0), no special tokens."""
    generator = np.random.default_rng(0)
    weights = 1.0 / np.arange(1, vocabulary + 1)
    ids = generator.choice(vocabulary, size=(texts, length), p=weights / weights.sum())
    return pl.DataFrame(
        {
            "sentence_id": np.repeat(np.arange(texts), length),
            "position": np.tile(np.arange(length, dtype=np.int32), texts),
            "token_id": ids.reshape(-1).astype(np.int64),
            "is_special": np.zeros(texts * length, dtype=bool),
        }
    )


def classes_of(tokens: pl.DataFrame) -> FuzzinessClasses:
    """Every next token of ``tokens`` a fuzziness class (``classes: all``)."""
    following = tokens.with_columns(next=pl.col("token_id").shift(-1).over("sentence_id"))
    counts = following.drop_nulls("next").group_by("next").len().sort("next")
    return FuzzinessClasses(counts["next"].to_numpy(), counts["len"].to_numpy())


def pass_seconds(model, tokens: pl.DataFrame, device: str) -> float:
    """Best of two model passes feeding the statistics and fuzziness observers."""
    facts = model_facts(model, {"kind": "memory"})

    def run() -> None:
        observers = [
            EquilearningStatistics(
                facts, OFFSETS, NORMS, CONTROLS, 0, present_ids(tokens, OFFSETS)
            ),
            SeparationFuzziness(facts, NORMS, classes_of(tokens)),
        ]
        run_forward_pass(model, facts, tokens, observers, BATCH, device, progress=False)

    return best_of(run, 2)[1]


@torch.inference_mode()
def forward_seconds(model, tokens: pl.DataFrame, device: str) -> float:
    """Best of two bare forward passes over the same batches."""
    ids = torch.from_numpy(
        tokens.sort("sentence_id", "position")["token_id"].to_numpy().reshape(-1, LENGTH).copy()
    )
    batches = length_sorted_batches([LENGTH] * len(ids), BATCH)

    def run() -> None:
        for batch in batches:
            inputs = ids[batch].to(device)
            model(input_ids=inputs, attention_mask=torch.ones_like(inputs), use_cache=False)

    return best_of(run, 2)[1]


def main() -> None:
    arguments = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    arguments.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    arguments.add_argument("--small", action="store_true")
    options = arguments.parse_args()
    shape = SHAPES["small" if options.small else "qwen2.5-1.5b"]
    texts = 8 if options.small else TEXTS
    device = options.device
    model = random_model(shape, device, torch.bfloat16)
    name = torch.cuda.get_device_name(device) if device.startswith("cuda") else "CPU"
    print(f"random Qwen2 {shape} in bfloat16 on {name}")

    tokens = zipf_tokens(texts, LENGTH, min(ZIPF_VOCABULARY, shape["vocab_size"]))
    forward_seconds(model, tokens.filter(pl.col("sentence_id") < BATCH), device)  # warm-up
    bare = forward_seconds(model, tokens, device)
    measured = pass_seconds(model, tokens, device)
    print(
        f"model pass: {measured:.2f} s, bare forward: {bare:.2f} s "
        f"({texts} texts of {LENGTH} tokens, batches of {BATCH}; statistics of "
        f"{len(OFFSETS)} offsets x {len(NORMS)} norms x {len(CONTROLS)} controls, fuzziness)"
    )

    ids = torch.randint(
        0, shape["vocab_size"], (1, PROMPT_LENGTH), generator=torch.Generator().manual_seed(1)
    ).to(device)
    middle = shape["num_hidden_layers"] // 2
    started = time.perf_counter()
    local = local_product_seconds(model, ids, middle, VJP_CHUNK)
    floor = floor_seconds(model, ids, middle, VJP_CHUNK)
    print(
        f"coupling product (block {middle + 1}, T = {PROMPT_LENGTH}): token-local "
        f"{local * 1e6:.1f} us, floor {floor * 1e6:.1f} us per product "
        f"({time.perf_counter() - started:.0f} s)"
    )
    print(
        f"gpu_pass_vs_forward={measured / bare:.2f} "
        f"gpu_coupling_product_vs_floor={local / floor:.2f}"
    )


if __name__ == "__main__":
    main()
