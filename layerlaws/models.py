"""Models: where they come from, how they are prepared once, and per-architecture facts.

A *prepared* model is a local folder (``save_pretrained`` layout, safetensors weights,
tokenizer files) plus ``layerlaws_model.json``; every later stage loads that folder, so a
GGUF file is dequantised and a hub model downloaded only once.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Mapping
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch

from layerlaws.errors import LayerlawsError
from layerlaws.packages import package_file

log = logging.getLogger(__name__)

MODEL_METADATA = "layerlaws_model.json"

DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}

EMBEDDINGS_FIRST = "embeddings_first"
"""``hidden_states`` = (embeddings, block 1, …, block L after the final norm): L + 1 tensors."""

BLOCKS_THEN_FINAL_NORM = "blocks_then_final_norm"
"""``hidden_states`` = (block 1, …, block L, final norm of block L): L + 1 tensors."""


@dataclass(frozen=True)
class Architecture:
    """Facts about one model family that the measurements depend on."""

    norm_type: str
    """Type of the model's own norms: ``layernorm`` or ``rmsnorm``."""
    eps_key: str
    """Config attribute holding the norms' epsilon."""
    hidden_states_layout: str
    """What ``output_hidden_states`` returns: EMBEDDINGS_FIRST or BLOCKS_THEN_FINAL_NORM."""
    blocks: str = "model.layers"
    """Attribute path of the list of residual blocks (decoder layers)."""


_LAYERNORM = Architecture("layernorm", "layer_norm_epsilon", EMBEDDINGS_FIRST, "transformer.h")
_RMSNORM = Architecture("rmsnorm", "rms_norm_eps", EMBEDDINGS_FIRST)

ARCHITECTURES: dict[str, Architecture] = {
    "gpt2": _LAYERNORM,
    "openai-gpt": _LAYERNORM,
    "gpt_neox": Architecture("layernorm", "layer_norm_eps", EMBEDDINGS_FIRST, "gpt_neox.layers"),
    "phi": Architecture("layernorm", "layer_norm_eps", EMBEDDINGS_FIRST),
    "llama": _RMSNORM,
    "mistral": _RMSNORM,
    "qwen2": _RMSNORM,
    "qwen3": _RMSNORM,
    "phi3": _RMSNORM,
    "gemma": _RMSNORM,
    "gemma2": _RMSNORM,
    "gemma3_text": _RMSNORM,
    "olmo2": _RMSNORM,
    "smollm3": _RMSNORM,
    "mamba": Architecture(
        "rmsnorm", "layer_norm_epsilon", BLOCKS_THEN_FINAL_NORM, "backbone.layers"
    ),
    "mamba2": Architecture(
        "rmsnorm", "layer_norm_epsilon", BLOCKS_THEN_FINAL_NORM, "backbone.layers"
    ),
    "rwkv": Architecture("layernorm", "layer_norm_epsilon", BLOCKS_THEN_FINAL_NORM, "rwkv.blocks"),
}


def architecture_of(config: Any) -> Architecture:
    """The table entry for ``config.model_type``, or one guessed from the config's eps key."""
    if config.model_type in ARCHITECTURES:
        return ARCHITECTURES[config.model_type]
    for key, norm_type in (
        ("rms_norm_eps", "rmsnorm"),
        ("layer_norm_eps", "layernorm"),
        ("layer_norm_epsilon", "layernorm"),
    ):
        if hasattr(config, key):
            log.warning(
                "model type %r is not in layerlaws.models.ARCHITECTURES; assuming %s "
                "(eps from %s) and hidden_states = (embeddings, blocks…)",
                config.model_type,
                norm_type,
                key,
            )
            return Architecture(norm_type, key, EMBEDDINGS_FIRST)
    raise LayerlawsError(
        f"model type {config.model_type!r} is unknown and its config names no norm epsilon; "
        f"add it to layerlaws.models.ARCHITECTURES"
    )


@dataclass(frozen=True)
class ModelFacts:
    """What the later stages need to know about a prepared model (``layerlaws_model.json``)."""

    model_type: str
    num_layers: int
    hidden_size: int
    vocab_size: int
    norm_type: str
    norm_eps: float
    hidden_states_layout: str
    tied_embeddings: bool
    max_positions: int | None
    source: dict[str, Any]


def _gguf_location(source: Mapping[str, Any]) -> Path:
    if source["kind"] == "gguf_package":
        return package_file(source["package"], source["file"])
    path = Path(source["path"])
    if not path.is_file():
        raise LayerlawsError(f"GGUF file {path} does not exist")
    return path


def _load_pretrained(source: Mapping[str, Any], trust_remote_code: bool) -> tuple[Any, Any]:
    """Model (float32, CPU) and tokenizer from a hub id, a local folder or a GGUF file."""
    from transformers import AutoConfig, AutoModelForCausalLM, AutoTokenizer

    kind = source["kind"]
    if kind in ("gguf_package", "gguf_file"):
        gguf = _gguf_location(source)
        folder, name = str(gguf.parent), gguf.name
        tokenizer = AutoTokenizer.from_pretrained(folder, gguf_file=name)
        quantised = AutoModelForCausalLM.from_pretrained(
            folder, gguf_file=name, dtype=torch.float32
        )
        # A model loaded from GGUF refuses save_pretrained: copy its dequantised weights
        # into a plain model built from the same config.
        model = AutoModelForCausalLM.from_config(AutoConfig.from_pretrained(folder, gguf_file=name))
        model.load_state_dict(quantised.state_dict())
        return model, tokenizer
    if kind == "local":
        where = source["path"]
        if not Path(where).is_dir():
            raise LayerlawsError(f"local model folder {where} does not exist")
        revision = None
    elif kind == "hub":
        where, revision = source["id"], source.get("revision")
    else:
        raise LayerlawsError(
            f"unknown model source kind {kind!r}; use hub, local, gguf_package or gguf_file"
        )
    try:
        tokenizer = AutoTokenizer.from_pretrained(
            where, revision=revision, trust_remote_code=trust_remote_code
        )
        model = AutoModelForCausalLM.from_pretrained(
            where, revision=revision, dtype=torch.float32, trust_remote_code=trust_remote_code
        )
    except Exception as error:
        raise LayerlawsError(
            f"could not load model {where!r} (revision {revision!r}): {error}. Check the id or "
            f"folder, that it is a causal LM, and (for the hub) that this machine can reach it"
        ) from error
    return model, tokenizer


def _randomly_initialised(model: Any, seed: int) -> Any:
    from transformers import AutoModelForCausalLM

    torch.manual_seed(seed)
    return AutoModelForCausalLM.from_config(model.config)


def _facts(model: Any, source: Mapping[str, Any]) -> ModelFacts:
    config = model.config
    architecture = architecture_of(config)
    input_weights = model.get_input_embeddings().weight
    output_layer = model.get_output_embeddings()
    tied = output_layer is not None and output_layer.weight.data_ptr() == input_weights.data_ptr()
    return ModelFacts(
        model_type=config.model_type,
        num_layers=int(config.num_hidden_layers),
        hidden_size=int(config.hidden_size),
        vocab_size=int(input_weights.shape[0]),
        norm_type=architecture.norm_type,
        norm_eps=float(getattr(config, architecture.eps_key, 1e-5) or 1e-5),
        hidden_states_layout=architecture.hidden_states_layout,
        tied_embeddings=bool(tied),
        max_positions=getattr(config, "max_position_embeddings", None),
        source=dict(source),
    )


def prepare_model(model_config: Mapping[str, Any], out_folder: str | Path) -> ModelFacts:
    """Load a model from its configured source and save it as a prepared folder.

    ``model_config`` holds ``source`` (see the config schema), ``init`` (``trained`` or
    ``random``: a randomly initialised twin of the same architecture, seeded by
    ``init_seed``) and ``trust_remote_code``. Writes into ``out_folder`` (which must not
    exist; the caller renames it into place).
    """
    source = model_config["source"]
    model, tokenizer = _load_pretrained(source, model_config.get("trust_remote_code", False))
    if model_config.get("init", "trained") == "random":
        model = _randomly_initialised(model, int(model_config.get("init_seed", 0)))
    facts = _facts(model, {**source, "init": model_config.get("init", "trained")})
    out = Path(out_folder)
    model.save_pretrained(out)
    tokenizer.save_pretrained(out)
    (out / MODEL_METADATA).write_text(json.dumps(asdict(facts), indent=2) + "\n")
    return facts


def read_facts(folder: str | Path) -> ModelFacts:
    """The facts saved beside a prepared model."""
    path = Path(folder) / MODEL_METADATA
    if not path.is_file():
        raise LayerlawsError(f"{folder} is not a prepared model folder (no {MODEL_METADATA})")
    return ModelFacts(**json.loads(path.read_text()))


def load_tokenizer(folder: str | Path) -> Any:
    """The tokenizer of a prepared model."""
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(str(folder))


def load_model(folder: str | Path, dtype: str, device: str, attention: str | None = None) -> Any:
    """A prepared model in evaluation mode, in ``dtype`` (a key of DTYPES) on ``device``;
    ``attention`` picks the attention implementation (``eager`` for torch.func
    transforms, whose batching rules the fused kernels lack)."""
    from transformers import AutoModelForCausalLM

    options = {} if attention is None else {"attn_implementation": attention}
    model = AutoModelForCausalLM.from_pretrained(str(folder), dtype=DTYPES[dtype], **options)
    return model.to(device).eval().requires_grad_(False)


def randomly_initialised_twin(model: Any, seed: int) -> Any:
    """A model of the same architecture and config with freshly initialised weights."""
    twin = _randomly_initialised(model, seed)
    reference = next(model.parameters())
    return twin.to(reference.device, reference.dtype).eval().requires_grad_(False)


def embedding_matrices(folder: str | Path) -> tuple[np.ndarray, np.ndarray, bool]:
    """Input (W_E) and output (W_U) embedding matrices of a prepared model, each
    (vocab_size, hidden_size) float32, and whether they are tied (the same weights)."""
    model = load_model(folder, "float32", "cpu")
    input_weights = model.get_input_embeddings().weight
    output_layer = model.get_output_embeddings()
    if output_layer is None:
        raise LayerlawsError(f"model in {folder} has no output embedding (LM head)")
    tied = output_layer.weight.data_ptr() == input_weights.data_ptr()
    return (
        input_weights.detach().numpy().copy(),
        output_layer.weight.detach().numpy().copy(),
        bool(tied),
    )
