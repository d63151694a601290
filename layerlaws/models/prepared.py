"""Models: where they come from, how they are prepared once, and the facts read from them.

A *prepared* model is a folder with ``layerlaws_model.json``: the model's facts and where
its weights and tokenizer lie. A local model is used where it is and a hub model from the
Hugging Face cache, never copied; a GGUF file is dequantised once and a randomly
initialised twin saved, in the folder itself (``save_pretrained`` layout, safetensors).
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, fields
from pathlib import Path
from typing import Any

import numpy as np
import torch

from layerlaws.core.errors import LayerlawsError
from layerlaws.core.packages import package_file
from layerlaws.models.architectures import (
    ARCHITECTURES,
    architecture_of,
    auto_class,
    blocks_of,
    embeddings_of,
    lm_head_of,
    norm_facts,
)
from layerlaws.models.placement import check_fits, device_budgets, device_map

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
    parameters: int
    """Number of parameters (tied weights counted once)."""
    weights_dtype: str
    """The dtype of the weights on disk."""
    weights: str | None
    """The folder of the weights and tokenizer when it is not the prepared folder (a local
    model's own folder, a hub model's snapshot in the Hugging Face cache)."""
    source: dict[str, Any]

    @classmethod
    def of(cls, metadata: Mapping[str, Any]) -> ModelFacts:
        """The facts within a larger metadata record (a pass report, a hidden-state
        folder's metadata.json)."""
        return cls(**{field.name: metadata[field.name] for field in fields(cls)})


def gguf_location(source: Mapping[str, Any]) -> Path:
    if source["kind"] == "gguf_package":
        return package_file(source["package"], source["file"])
    path = Path(source["path"])
    if not path.is_file():
        raise LayerlawsError(f"GGUF file {path} does not exist")
    return path


def _gguf_config(gguf: Path) -> Any:
    """The config inside a GGUF file, checked against the architecture table."""
    from transformers import AutoConfig

    config = AutoConfig.from_pretrained(str(gguf.parent), gguf_file=gguf.name)
    architecture_of(config)
    return config


def _from_gguf(gguf: Path) -> tuple[Any, Any]:
    """Model (float32, CPU) and tokenizer from a GGUF file, its weights dequantised."""
    from transformers import AutoModelForCausalLM, AutoTokenizer

    folder, name = str(gguf.parent), gguf.name
    config = _gguf_config(gguf)
    tokenizer = AutoTokenizer.from_pretrained(folder, gguf_file=name)
    quantised = AutoModelForCausalLM.from_pretrained(folder, gguf_file=name, dtype=torch.float32)
    # A model loaded from GGUF refuses save_pretrained: copy its dequantised weights into a
    # plain model built from the same config.
    model = AutoModelForCausalLM.from_config(config)
    model.load_state_dict(quantised.state_dict())
    return model, tokenizer


HUB_FILES = ["*.json", "*.safetensors", "*.model", "*.txt", "*.tiktoken", "tokenizer*"]
"""What is fetched of a hub model: config, safetensors weights, tokenizer files (weights
only as ``.bin`` when a repository has no safetensors)."""


def _hub_snapshot(model_id: str, revision: str | None) -> Path:
    """The local folder of a hub model in the Hugging Face cache (downloaded there once,
    used where it lies)."""
    from huggingface_hub import snapshot_download

    folder = Path(snapshot_download(model_id, revision=revision, allow_patterns=HUB_FILES))
    if not any(folder.glob("*.safetensors")):
        folder = Path(
            snapshot_download(model_id, revision=revision, allow_patterns=[*HUB_FILES, "*.bin"])
        )
    return folder


def read_config(where: str, revision: str | None, trust_remote_code: bool) -> Any:
    """The config of a hub id or local folder, checked against the architecture table before
    any weights are fetched."""
    from transformers import AutoConfig

    try:
        config = AutoConfig.from_pretrained(
            where, revision=revision, trust_remote_code=trust_remote_code
        )
    except Exception as error:
        raise LayerlawsError(
            f"could not load model {where!r} (revision {revision!r}): {error}. Check the id or "
            f"folder and (for the hub) that this machine can reach it"
        ) from error
    architecture_of(config)
    return config


def _weights_folder(source: Mapping[str, Any], trust_remote_code: bool) -> tuple[Path, Any]:
    """(folder of the weights and tokenizer, config) of a hub or local source."""
    if source["kind"] == "local":
        folder = Path(source["path"]).resolve()
        if not folder.is_dir():
            raise LayerlawsError(f"local model folder {source['path']} does not exist")
        return folder, read_config(str(folder), None, trust_remote_code)
    if source["kind"] != "hub":
        raise LayerlawsError(
            f"unknown model source kind {source['kind']!r}; use hub, local, gguf_package or "
            f"gguf_file"
        )
    config = read_config(source["id"], source.get("revision"), trust_remote_code)
    try:
        return _hub_snapshot(source["id"], source.get("revision")), config
    except Exception as error:
        raise LayerlawsError(
            f"could not fetch the weights of {source['id']!r}: {error}. Check that this machine "
            f"can reach the hub (and, for a gated model, that you accepted its licence and ran "
            f"`huggingface-cli login`)"
        ) from error


def source_config(model_config: Mapping[str, Any]) -> Any:
    """The config of a configured model (``models.<key>``), read without its weights from
    its GGUF file, local folder or the hub."""
    source, remote_code = model_config["source"], model_config.get("trust_remote_code", False)
    if source["kind"] in ("gguf_package", "gguf_file"):
        return _gguf_config(gguf_location(source))
    where = source["path"] if source["kind"] == "local" else source["id"]
    return read_config(where, source.get("revision"), remote_code)


def skeleton_of(config: Any, trust_remote_code: bool) -> Any:
    """The model of ``config`` on the meta device: every module, no weights in memory."""
    with torch.device("meta"):
        return auto_class(config.model_type).from_config(
            config, trust_remote_code=trust_remote_code
        )


def _checked_tokenizer(folder: Path) -> Any:
    """The tokenizer in ``folder``, or a LayerlawsError saying it has none."""
    from transformers import AutoTokenizer

    try:
        return AutoTokenizer.from_pretrained(str(folder))
    except Exception as error:
        raise LayerlawsError(f"the model in {folder} has no usable tokenizer: {error}") from error


def _randomly_initialised(model: Any, init_seed: int) -> Any:
    torch.manual_seed(init_seed)
    return auto_class(model.config.model_type).from_config(model.config)


def tied_embeddings(model: Any) -> bool:
    """Whether the LM head shares its weight with the input embeddings (W_U = W_E)."""
    return lm_head_of(model).weight is embeddings_of(model).weight


def weights_dtype(config: Any) -> str:
    """The dtype the weights are stored in, as the config names it (float32 if it does not)."""
    dtype = getattr(config, "dtype", None) or getattr(config, "torch_dtype", None)
    return str(dtype or "float32").removeprefix("torch.")


def model_facts(model: Any, source: Mapping[str, Any], weights: str | None = None) -> ModelFacts:
    """The facts of a model (loaded, or a skeleton on the meta device), read from the
    modules its table row names; ``weights`` is where its weights lie when not in the
    prepared folder.

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
        parameters=sum(parameter.numel() for parameter in model.parameters()),
        weights_dtype=weights_dtype(config),
        weights=weights,
        source=dict(source),
    )


def prepare_model(model_config: Mapping[str, Any], out_folder: str | Path) -> ModelFacts:
    """Prepare a model from its configured source: write its facts into ``out_folder``
    (which must not exist; the caller renames it into place), and its weights only where
    they lie nowhere else.

    ``model_config`` holds ``source`` (see the config schema), ``init`` (``trained`` or
    ``random``: a randomly initialised twin of the same architecture, seeded by
    ``init_seed``) and ``trust_remote_code``. A local folder is used where it is and a hub
    model from the Hugging Face cache (its facts record the folder): neither is copied. A
    GGUF is dequantised once and saved (float32); a random twin is saved in the dtype its
    config names.
    """
    source, init = model_config["source"], model_config.get("init", "trained")
    remote_code = model_config.get("trust_remote_code", False)
    out = Path(out_folder)
    if source["kind"] in ("gguf_package", "gguf_file"):
        model, tokenizer = _from_gguf(gguf_location(source))
        weights = None
    else:
        folder, config = _weights_folder(source, remote_code)
        tokenizer = _checked_tokenizer(folder)
        model, weights = skeleton_of(config, remote_code), str(folder)
    if init == "random":
        model = _randomly_initialised(model, int(model_config.get("init_seed", 0)))
        model = model.to(getattr(torch, weights_dtype(model.config)))
        weights = None
    facts = model_facts(model, {**source, "init": init}, weights)
    out.mkdir(parents=True)
    if weights is None:
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


def weights_folder(folder: str | Path) -> Path:
    """Where the weights and tokenizer of a prepared model lie (a folder without
    ``layerlaws_model.json`` holds its own, ``save_pretrained`` layout)."""
    if not (Path(folder) / MODEL_METADATA).is_file():
        return Path(folder)
    return Path(read_facts(folder).weights or folder)


def load_tokenizer(folder: str | Path) -> Any:
    """The tokenizer of a prepared model."""
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(str(weights_folder(folder)))


def plan_placement(
    folder: str | Path,
    dtype: str,
    devices: Sequence[str],
    budgets: Mapping[str, int] | None = None,
) -> str | dict[str, str]:
    """Where a prepared model's weights go on ``devices``: the device itself, or for
    several a device map that spreads its blocks over them within ``budgets`` (bytes of
    weights per device; by default from the GPUs' free memory). Planned on a skeleton, so a
    model that does not fit stops with a LayerlawsError before anything is loaded."""
    from transformers import AutoConfig

    skeleton = skeleton_of(AutoConfig.from_pretrained(str(weights_folder(folder))), False)
    if len(devices) == 1:
        check_fits(skeleton, DTYPES[dtype], devices[0])
        return devices[0]
    return device_map(skeleton, DTYPES[dtype], budgets or device_budgets(devices))


def load_model(
    folder: str | Path, dtype: str, placement: str | Mapping[str, str], attention: str | None = None
) -> Any:
    """A prepared model in evaluation mode, in ``dtype`` (a key of DTYPES), on one device or
    spread by a device map (``plan_placement``); ``attention`` picks the attention
    implementation (``eager`` for Jacobians, whose batching rules the fused kernels lack)."""
    options: dict[str, Any] = {} if attention is None else {"attn_implementation": attention}
    if not isinstance(placement, str):
        options["device_map"] = dict(placement)
    from transformers import AutoConfig

    weights = str(weights_folder(folder))
    model_type = AutoConfig.from_pretrained(weights).model_type
    model = auto_class(model_type).from_pretrained(weights, dtype=DTYPES[dtype], **options)
    if isinstance(placement, str):
        model = model.to(placement)
    return model.eval().requires_grad_(False)


def randomly_initialised_twin(model: Any, init_seed: int) -> Any:
    """A model of the same architecture and config with freshly initialised weights, placed
    like ``model``."""
    twin = _randomly_initialised(model, init_seed)
    reference = next(model.parameters())
    twin = twin.to(reference.dtype)
    if getattr(model, "hf_device_map", None):
        from accelerate import dispatch_model

        twin = dispatch_model(twin, device_map=model.hf_device_map)
    else:
        twin = twin.to(reference.device)
    return twin.eval().requires_grad_(False)


def coupling_twins(
    folder: str | Path,
    initial: str | Path | None,
    dtype: str,
    placement: str | Mapping[str, str],
    init_seed: int,
) -> dict[str, Any]:
    """The weights coupling compares, loaded with eager attention: ``trained`` (the model
    in ``folder``) and ``random`` — the prepared model in ``initial`` (a training's step-0
    checkpoint) when given, else a fresh random twin seeded by ``init_seed``."""
    trained = load_model(folder, dtype, placement, attention="eager")
    if initial is not None:
        untrained = load_model(initial, dtype, placement, attention="eager")
    else:
        untrained = randomly_initialised_twin(trained, init_seed)
    return {"trained": trained, "random": untrained}


def _stored_embeddings(folder: Path, facts: ModelFacts) -> tuple[Any, Any] | None:
    """W_E and W_U as stored in the safetensors files of ``folder`` (W_U None when tied),
    found by their shape (vocab_size, hidden_size) and W_E by its module's name; None when
    they cannot be told apart that way."""
    from safetensors import safe_open

    architecture = ARCHITECTURES[facts.model_type]
    embedding_name = architecture.embeddings.rsplit(".", 1)[-1] + ".weight"
    found: dict[str, Any] = {}
    for path in sorted(folder.glob("*.safetensors")):
        with safe_open(str(path), framework="pt") as stored:
            for key in stored.keys():  # noqa: SIM118 (safe_open is no mapping)
                if stored.get_slice(key).get_shape() == [facts.vocab_size, facts.hidden_size]:
                    found[key] = stored.get_tensor(key)
    embedding = [key for key in found if key.endswith(embedding_name)]
    if len(embedding) != 1 or len(found) > 2:
        return None
    rest = [tensor for key, tensor in found.items() if key != embedding[0]]
    if not rest and not facts.tied_embeddings:
        return None
    return found[embedding[0]], rest[0] if rest else None


def embedding_matrices(folder: str | Path) -> tuple[np.ndarray, np.ndarray, bool]:
    """Input (W_E) and output (W_U) embedding matrices of a prepared model, each
    (vocab_size, hidden_size) float32, and whether they are tied (the same weights).

    Read straight from the safetensors files, without building the model; only where the
    two cannot be found by shape and name is the model loaded.
    """
    facts = read_facts(folder)
    stored = _stored_embeddings(weights_folder(folder), facts)
    if stored is None:
        model = load_model(folder, "float32", "cpu")
        stored = embeddings_of(model).weight, lm_head_of(model).weight
    input_weights = stored[0].detach().float().numpy().copy()
    if stored[1] is None or facts.tied_embeddings:
        return input_weights, input_weights, True
    return input_weights, stored[1].detach().float().numpy().copy(), False
