"""The facts of a model, read through its row of the architecture table and saved beside a
prepared model (``layerlaws_model.json``): layers, widths, norm, vocabulary, parameters.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import MISSING, dataclass, fields, replace
from pathlib import Path
from typing import Any

from layerlaws.core.errors import LayerlawsError
from layerlaws.models.architectures import (
    LayerChoice,
    architecture_of,
    blocks_of,
    embeddings_of,
    lm_head_of,
    norm_facts,
    stack_sizes,
)
from layerlaws.models.metadata import MODEL_METADATA


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
    lm_head_trained: bool = True
    """Whether the LM head's weights (for an encoder, its whole masked-LM head) were in the
    source's checkpoint; false when loading left them randomly initialised on top of a
    trained body (a sentence encoder such as all-MiniLM-L6-v2, saved without its head). A
    random twin records its source's value. Facts prepared before this field existed read
    true."""
    decoder_layers: int | None = None
    """An encoder–decoder's decoder blocks L_d (its encoder's are ``num_layers`` − L_d); 0
    for a model of one stack; None in facts prepared before this field existed."""
    encoder_parameters: int | None = None
    """An encoder–decoder's encoder's parameters (``architectures.stack_sizes``: what
    transformers' ``T5EncoderModel`` holds), by which the planner sizes a pass that runs the
    encoder alone; 0 for a model of one stack; None in facts prepared before this field
    existed."""

    def counting(self, choice: LayerChoice) -> ModelFacts:
        """These facts with ``num_layers`` the L of the layers ``choice`` takes (an
        encoder–decoder's one stack: L_e or L_d); a LayerlawsError for facts that do not
        say how an encoder–decoder's blocks divide."""
        if choice.stack == "both":
            return self
        if self.decoder_layers is None:
            raise LayerlawsError(
                f"these facts of a {self.model_type!r} model were prepared before layerlaws "
                f"recorded its decoder's blocks: delete the prepared model's folder and rerun "
                f"the workflow to prepare it again"
            )
        if not self.decoder_layers:
            raise LayerlawsError(
                f"a {self.model_type!r} model has one stack of blocks: its layers cannot be "
                f"its {choice.stack}'s alone"
            )
        decoder = self.decoder_layers
        return replace(
            self, num_layers=decoder if choice.stack == "decoder" else self.num_layers - decoder
        )

    @classmethod
    def of(cls, metadata: Mapping[str, Any]) -> ModelFacts:
        """The facts within a larger metadata record (a pass report, a hidden-state
        folder's metadata.json); a field with a default may be missing (an older record)."""
        return cls(
            **{
                field.name: metadata[field.name]
                for field in fields(cls)
                if field.name in metadata or field.default is MISSING
            }
        )


def tied_embeddings(model: Any) -> bool:
    """Whether the LM head shares its weight with the input embeddings (W_U = W_E)."""
    return lm_head_of(model).weight is embeddings_of(model).weight


def weights_dtype(config: Any) -> str:
    """The dtype the weights are stored in, as the config names it (float32 if it does not)."""
    dtype = getattr(config, "dtype", None) or getattr(config, "torch_dtype", None)
    return str(dtype or "float32").removeprefix("torch.")


def model_facts(
    model: Any,
    source: Mapping[str, Any],
    weights: str | None = None,
    lm_head_trained: bool = True,
) -> ModelFacts:
    """The facts of a model (loaded, or a skeleton on the meta device), read from the
    modules its table row names; ``weights`` is where its weights lie when not in the
    prepared folder, ``lm_head_trained`` whether its checkpoint held its LM head
    (``layerlaws.models.checkpoints``).

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
    decoder_layers, encoder_parameters = stack_sizes(model)
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
        lm_head_trained=lm_head_trained,
        decoder_layers=decoder_layers,
        encoder_parameters=encoder_parameters,
    )


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


def tokenizer_folder(folder: str | Path) -> Path:
    """Where the tokenizer of a prepared model lies: the prepared folder when one was saved
    there (a tokenizer from another source than the weights', ``models.<key>.tokenizer``),
    else with the weights (``weights_folder``)."""
    if (Path(folder) / "tokenizer_config.json").is_file():
        return Path(folder)
    return weights_folder(folder)
