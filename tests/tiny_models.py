"""The tiny models of every family (``layerlaws.rehearsal.tiny_models``) as the coupling
tests load them, and which families the tests expect to take which path."""

from __future__ import annotations

from pathlib import Path

from layerlaws.models.loading import load_model
from layerlaws.rehearsal.tiny_models import (  # noqa: F401 (the tests import them from here)
    ENCODER_DECODER_OPTIONS,
    ENCODER_OPTIONS,
    FAMILIES,
    FAMILY_OPTIONS,
    WIDTH,
    save_tiny_model,
    tiny_config,
)

# The families as the coupling tests load them: three blocks, float64 where they run in it.

ALL_FAMILIES = (*FAMILIES, *ENCODER_OPTIONS)
NUM_BLOCKS = 3
FLOAT32_FAMILIES = {
    "mixtral": "transformers' grouped-matmul experts take no float64",
    "qwen2_moe": "transformers' grouped-matmul experts take no float64",
    "qwen3_moe": "transformers' grouped-matmul experts take no float64",
    "jamba": "transformers' grouped-matmul experts take no float64",
    "xglm": "its attention mask fills with float64's minimum, which overflows a float",
}
"""Families measured in float32, and why not in float64."""
HYBRID_FAMILIES = {"jamba", "recurrent_gemma"}
"""Families with whole-sequence products (the architecture table's column) whose tiny
model's middle block is an attention layer, re-run token by token all the same."""


def family_sizes(family: str) -> dict:
    """Sizes of a three-block tiny model (GPT-Neo lists one attention type per block)."""
    sizes: dict = {"num_hidden_layers": NUM_BLOCKS}
    if family == "gpt_neo":
        sizes["attention_types"] = [[["global", "local", "global"], 1]]
    return sizes


def family_dtype(family: str) -> str:
    """float64 where the family runs in it."""
    return "float32" if family in FLOAT32_FAMILIES else "float64"


def tiny_family_model(family: str, tokenizer, folder: Path):
    """The tiny ``family`` model (seed 0) loaded as the coupling stage loads it (eager
    attention, evaluation mode)."""
    save_tiny_model(folder, family, tokenizer, **family_sizes(family))
    return load_model(folder, family_dtype(family), "cpu", attention="eager")
