"""Models: where they come from, how they are prepared once, and the facts read from them.

A *prepared* model is a local folder (``save_pretrained`` layout, safetensors weights,
tokenizer files) plus ``layerlaws_model.json``; every later stage loads that folder, so a
GGUF file is dequantised and a hub model downloaded only once.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch

from layerlaws.architectures import (
    architecture_of,
    blocks_of,
    embeddings_of,
    lm_head_of,
    norm_facts,
)
from layerlaws.errors import LayerlawsError
from layerlaws.packages import package_file

MODEL_METADATA = "layerlaws_model.json"

DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}


@dataclass(frozen=True)
class ModelFacts:
    """What the later stages need to know about a prepared model (``layerlaws_model.json``),
    read from the model itself through its row of the architecture table."""

    model_type: str
    num_layers: int
    """Residual blocks L; hidden states are numbered 0..L."""
    hidden_size: int
    vocab_size: int
    """Rows of the input embedding matrix."""
    norm_type: str
    """``layernorm`` or ``rmsnorm``, from the class of the model's norm module."""
    norm_eps: float
    post_ln: bool
    """Whether the blocks normalise the stream they output (GPT-1); else pre-LN."""
    tied_embeddings: bool
    max_positions: int | None
    """Longest input the model accepts (None: no limit, e.g. Mamba and RWKV)."""
    source: dict[str, Any]


def _gguf_location(source: Mapping[str, Any]) -> Path:
    if source["kind"] == "gguf_package":
        return package_file(source["package"], source["file"])
    path = Path(source["path"])
    if not path.is_file():
        raise LayerlawsError(f"GGUF file {path} does not exist")
    return path


def _from_gguf(gguf: Path) -> tuple[Any, Any]:
    """Model (float32, CPU) and tokenizer from a GGUF file, its weights dequantised."""
    from transformers import AutoConfig, AutoModelForCausalLM, AutoTokenizer

    folder, name = str(gguf.parent), gguf.name
    config = AutoConfig.from_pretrained(folder, gguf_file=name)
    architecture_of(config)
    tokenizer = AutoTokenizer.from_pretrained(folder, gguf_file=name)
    quantised = AutoModelForCausalLM.from_pretrained(folder, gguf_file=name, dtype=torch.float32)
    # A model loaded from GGUF refuses save_pretrained: copy its dequantised weights into a
    # plain model built from the same config.
    model = AutoModelForCausalLM.from_config(config)
    model.load_state_dict(quantised.state_dict())
    return model, tokenizer


def _from_pretrained(where: str, revision: str | None, trust_remote_code: bool) -> tuple[Any, Any]:
    """Model (float32, CPU) and tokenizer from a hub id or a local folder; the config is
    read first, so an unsupported family is rejected before any weights are loaded."""
    from transformers import AutoConfig, AutoModelForCausalLM, AutoTokenizer

    options = {"revision": revision, "trust_remote_code": trust_remote_code}
    try:
        config = AutoConfig.from_pretrained(where, **options)
    except Exception as error:
        raise LayerlawsError(
            f"could not load model {where!r} (revision {revision!r}): {error}. Check the id or "
            f"folder and (for the hub) that this machine can reach it"
        ) from error
    architecture_of(config)
    try:
        tokenizer = AutoTokenizer.from_pretrained(where, **options)
        model = AutoModelForCausalLM.from_pretrained(where, dtype=torch.float32, **options)
    except Exception as error:
        raise LayerlawsError(
            f"could not load model {where!r} (revision {revision!r}): {error}. Check that it "
            f"is a causal LM with a tokenizer"
        ) from error
    return model, tokenizer


def _load_pretrained(source: Mapping[str, Any], trust_remote_code: bool) -> tuple[Any, Any]:
    """Model (float32, CPU) and tokenizer from a hub id, a local folder or a GGUF file."""
    kind = source["kind"]
    if kind in ("gguf_package", "gguf_file"):
        return _from_gguf(_gguf_location(source))
    if kind == "local":
        if not Path(source["path"]).is_dir():
            raise LayerlawsError(f"local model folder {source['path']} does not exist")
        return _from_pretrained(source["path"], None, trust_remote_code)
    if kind == "hub":
        return _from_pretrained(source["id"], source.get("revision"), trust_remote_code)
    raise LayerlawsError(
        f"unknown model source kind {kind!r}; use hub, local, gguf_package or gguf_file"
    )


def _randomly_initialised(model: Any, init_seed: int) -> Any:
    from transformers import AutoModelForCausalLM

    torch.manual_seed(init_seed)
    return AutoModelForCausalLM.from_config(model.config)


def tied_embeddings(model: Any) -> bool:
    """Whether the LM head shares its weight with the input embeddings (W_U = W_E)."""
    return lm_head_of(model).weight.data_ptr() == embeddings_of(model).weight.data_ptr()


def model_facts(model: Any, source: Mapping[str, Any]) -> ModelFacts:
    """The facts of a loaded model, read from the modules its table row names.

    The row is checked against the model: its embeddings and LM head must be the modules
    transformers reports, and the LM head must read the residual stream's width (a model
    that projects the stream before its head is rejected).
    """
    config = model.config
    architecture = architecture_of(config)
    embeddings, lm_head = embeddings_of(model), lm_head_of(model)
    for part, module, reported in (
        ("embeddings", embeddings, model.get_input_embeddings()),
        ("lm_head", lm_head, model.get_output_embeddings()),
    ):
        if module is not reported:
            raise LayerlawsError(
                f"the architecture table's {part} path for {config.model_type!r} "
                f"({getattr(architecture, part)!r}) is not the module transformers reports"
            )
    vocab_size, hidden_size = embeddings.weight.shape
    if lm_head.weight.shape[1] != hidden_size:
        raise LayerlawsError(
            f"the LM head of this {config.model_type!r} model reads {lm_head.weight.shape[1]} "
            f"features but its residual stream has {hidden_size}: a projected stream is not "
            f"supported"
        )
    norm_type, norm_eps = norm_facts(model)
    return ModelFacts(
        model_type=config.model_type,
        num_layers=len(blocks_of(model)),
        hidden_size=int(hidden_size),
        vocab_size=int(vocab_size),
        norm_type=norm_type,
        norm_eps=norm_eps,
        post_ln=architecture.post_ln,
        tied_embeddings=tied_embeddings(model),
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
    init = model_config.get("init", "trained")
    if init == "random":
        model = _randomly_initialised(model, int(model_config.get("init_seed", 0)))
    facts = model_facts(model, {**source, "init": init})
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
    try:
        return ModelFacts(**json.loads(path.read_text()))
    except (ValueError, TypeError) as error:
        raise LayerlawsError(
            f"{path} is corrupt or from an older layerlaws ({error}); delete {folder} and "
            f"rerun the workflow to prepare the model again"
        ) from error


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


def randomly_initialised_twin(model: Any, init_seed: int) -> Any:
    """A model of the same architecture and config with freshly initialised weights."""
    twin = _randomly_initialised(model, init_seed)
    reference = next(model.parameters())
    return twin.to(reference.device, reference.dtype).eval().requires_grad_(False)


def embedding_matrices(folder: str | Path) -> tuple[np.ndarray, np.ndarray, bool]:
    """Input (W_E) and output (W_U) embedding matrices of a prepared model, each
    (vocab_size, hidden_size) float32, and whether they are tied (the same weights)."""
    model = load_model(folder, "float32", "cpu")
    return (
        embeddings_of(model).weight.detach().numpy().copy(),
        lm_head_of(model).weight.detach().numpy().copy(),
        tied_embeddings(model),
    )
