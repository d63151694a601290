"""Tiny randomly initialised causal LMs (and masked-LM encoders, and encoder–decoders) of
every family in the architecture table: the stand-ins of a rehearsal
(``layerlaws.rehearsal.standins``) and the test suite's models.

Each is built from its transformers config class with a few hidden units and layers, so a
family is exercised end to end in a fraction of a second. Sizes that every family shares
are set here once; ``FAMILY_OPTIONS`` holds what a family needs besides (its own names for
widths, expert counts, layer patterns).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import torch
from transformers import CONFIG_MAPPING, PreTrainedTokenizerBase

from layerlaws.models.architectures import auto_class

WIDTH = 32
"""Hidden size of the family models."""

_ATTENTION = {"num_attention_heads": 4, "max_position_embeddings": 64}
_DECODER = {**_ATTENTION, "intermediate_size": 64, "num_key_value_heads": 2}
_GEMMA = {**_DECODER, "head_dim": 8, "sliding_window": 8, "query_pre_attn_scalar": 8}
_MOE = {"num_experts_per_tok": 2, "moe_intermediate_size": 16}
_MAMBA = {"state_size": 4, "intermediate_size": 64, "time_step_rank": 4}

FAMILY_OPTIONS: dict[str, dict[str, Any]] = {
    "gpt2": _ATTENTION,
    "openai-gpt": _ATTENTION,
    "gpt_neo": {**_ATTENTION, "attention_types": [[["global", "local"], 1]], "window_size": 8},
    "gptj": {**_ATTENTION, "rotary_dim": 4},
    "codegen": {**_ATTENTION, "rotary_dim": 4, "n_ctx": 64},
    "gpt_bigcode": _ATTENTION,
    "gpt_neox": {**_ATTENTION, "intermediate_size": 64},
    "opt": {**_ATTENTION, "ffn_dim": 64, "word_embed_proj_dim": WIDTH},
    "bloom": {"num_attention_heads": 4},
    "falcon": {**_ATTENTION, "num_kv_heads": 4, "ffn_hidden_size": 64},
    "mpt": {"n_heads": 4, "max_seq_len": 64},
    "xglm": {**_ATTENTION, "ffn_dim": 64},
    "llama": _DECODER,
    "mistral": _DECODER,
    "mixtral": {**_DECODER, "num_local_experts": 4, "num_experts_per_tok": 2},
    "qwen2": _DECODER,
    "qwen2_moe": {**_DECODER, **_MOE, "num_experts": 4, "shared_expert_intermediate_size": 32},
    "qwen3": {**_DECODER, "head_dim": 8},
    "qwen3_moe": {**_DECODER, **_MOE, "num_local_experts": 4},
    "phi": _DECODER,
    "phi3": _DECODER,
    "gemma": {**_DECODER, "head_dim": 8},
    "gemma2": _GEMMA,
    "gemma3_text": _GEMMA,
    "olmo": _DECODER,
    "olmo2": _DECODER,
    "stablelm": _DECODER,
    "starcoder2": _DECODER,
    "cohere": _DECODER,
    "granite": _DECODER,
    "smollm3": _DECODER,
    "jamba": {
        **_DECODER,
        "attn_layer_period": 2,
        "attn_layer_offset": 1,
        "expert_layer_period": 2,
        "expert_layer_offset": 1,
        "num_experts": 2,
        "num_experts_per_tok": 1,
        "use_mamba_kernels": False,
        "mamba_dt_rank": 4,
        "mamba_d_state": 4,
    },
    "recurrent_gemma": {
        **_ATTENTION,
        "intermediate_size": 64,
        "lru_width": WIDTH,
        "head_dim": 8,
        "num_key_value_heads": 4,
        "attention_window_size": 16,
        "block_types": ["recurrent", "attention"],
    },
    "mamba": _MAMBA,
    "falcon_mamba": _MAMBA,
    "mamba2": {"state_size": 8, "num_heads": 8, "head_dim": 8, "n_groups": 1, "chunk_size": 8},
    "rwkv": {"attention_hidden_size": WIDTH, "intermediate_size": 64, "context_length": 64},
}
"""Config options of each causal family besides vocabulary, width and depth."""

FAMILIES = tuple(FAMILY_OPTIONS)
ENCODER_OPTIONS: dict[str, dict[str, Any]] = {
    "bert": {**_ATTENTION, "intermediate_size": 64},
    "roberta": {**_ATTENTION, "intermediate_size": 64},
}
"""Config options of each masked-LM encoder family."""
ENCODER_DECODER_OPTIONS: dict[str, dict[str, Any]] = {
    "t5": {
        "num_heads": 4,
        "d_kv": 8,
        "d_ff": 64,
        "num_decoder_layers": 2,
        "decoder_start_token_id": 0,  # the pad token, as the hub's T5 configs name it
    },
}
"""Config options of each encoder–decoder family (2 + 2 blocks: layers 0..4)."""
FAMILY_OPTIONS.update(ENCODER_OPTIONS)
FAMILY_OPTIONS.update(ENCODER_DECODER_OPTIONS)


def tiny_config(family: str, tokenizer: PreTrainedTokenizerBase, **sizes: Any) -> Any:
    """The config of a tiny ``family`` model whose vocabulary is ``tokenizer``'s; ``sizes``
    override the family's options (e.g. ``hidden_size``, ``num_hidden_layers``)."""
    options = {
        "vocab_size": len(tokenizer),
        "hidden_size": WIDTH,
        "num_hidden_layers": 2,
        "bos_token_id": tokenizer.bos_token_id,
        "eos_token_id": tokenizer.eos_token_id,
        "pad_token_id": tokenizer.pad_token_id,
        **FAMILY_OPTIONS[family],
        **sizes,
    }
    return CONFIG_MAPPING[family](**options)


def save_tiny_model(
    folder: Path,
    family: str,
    tokenizer: PreTrainedTokenizerBase,
    dtype: torch.dtype = torch.float32,
    **sizes: Any,
) -> Path:
    """Save a tiny randomly initialised (seed 0) ``family`` model, its weights in
    ``dtype``, and ``tokenizer`` to ``folder``."""
    torch.manual_seed(0)
    config = tiny_config(family, tokenizer, dtype=dtype, **sizes)
    model = auto_class(family).from_config(config).to(dtype)
    model.save_pretrained(folder)
    tokenizer.save_pretrained(folder)
    return folder
