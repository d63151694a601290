"""The architecture table: the one place where a model family is described.

Every stage finds a model's parts through its row: the residual blocks, the token
embeddings, the final norm and the LM head. Per-layer states are taken with forward hooks
at these places, never from a family's ``output_hidden_states`` convention:

- layer 0 is what the first block receives (the embeddings as the model scales, adds
  positions to and normalises them);
- layer l (1 ≤ l < L) is what block l + 1 receives (the output of block l, after anything
  the model does between blocks, such as RWKV's rescaling);
- layer L is what the LM head receives (after the final norm, if the model has one); for
  encoders, whose masked-LM head transforms the stream (dense, activation, norm) before
  W_U, what that head receives: the last block's output.

An encoder–decoder model (T5) has two stacks, numbered as one: its ``blocks`` are the
encoder's L_e blocks and its ``decoder_blocks`` the decoder's L_d, so L = L_e + L_d.

- layers 0..L_e are the encoder's: layer 0 the embeddings the first encoder block
  receives, layer l (1 ≤ l < L_e) what encoder block l + 1 receives, layer L_e the
  encoder's output after its final norm (``encoder_norm``): what the decoder's
  cross-attention reads;
- layer L_e + j (1 ≤ j ≤ L_d) is the output of decoder block j: what decoder block j + 1
  receives, and for the last, layer L = L_e + L_d, the decoder's output after its final
  norm (transformers' last ``decoder_hidden_states``). T5 with tied embeddings multiplies
  it by d^−0.5 before the LM head; layer L is taken before that constant factor, which
  changes no regression.

The decoder's own embeddings (what decoder block 1 receives) are no layer. Each layer's
rows are read where ``layerlaws.forward.span_corruption`` says (the decoder's positions;
the encoder layers at the encoder position that stands for each row). That is the
numbering of ``LayerChoice(stack="both")``; a pass may take one stack's layers alone
instead (``LayerChoice``: He & Su's released code regresses the encoder's states under
next-token probing and the decoder's under span corruption).

He & Su's released code numbers a model's layers as transformers' ``output_hidden_states``
does. That is the numbering above for every family but those whose row says
``hidden_states_from_first_block`` (Mamba, Mamba-2, Falcon-Mamba, RWKV): their tuple holds
no embeddings, but the output of each block and, last, the final norm's output, so that the
last block's output is in it twice (before and after the final norm).
``LayerChoice(hidden_states=True)`` numbers their layers so.

Facts that can be read from the model itself are read, not stored here: the norm's type
(from its class) and epsilon (from the module), the number of blocks, the hidden size,
whether the embeddings are tied. A block's residual branch is built the same way for
every family (``layerlaws.models.blocks``): the block called with the arguments it received in a
forward pass, its first output minus its input.

Adding a family is adding one row; a family not in the table is rejected before anything
is measured, with a message saying so.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from operator import attrgetter
from typing import TYPE_CHECKING, Any

from layerlaws.core.errors import LayerlawsError

if TYPE_CHECKING:
    import torch


@dataclass(frozen=True)
class Architecture:
    """Where a family keeps its parts, and what cannot be read from them."""

    blocks: str
    """Attribute path of the list of residual blocks, first to last."""
    embeddings: str
    """Attribute path of the token embedding module (W_E)."""
    final_norm: str | None
    """Attribute path of the norm between the last block and the LM head; None when the
    model has none (post-LN GPT-1, whose blocks end with a norm)."""
    lm_head: str = "lm_head"
    """Attribute path of the LM head (W_U); its input is layer L."""
    post_ln: bool = False
    """Each block normalises the residual stream it outputs (GPT-1, BERT); otherwise the
    stream between blocks is raw (pre-LN, nearly all models)."""
    head_input: str | None = None
    """Attribute path of the module whose input is layer L when the LM head reads a
    transformed stream (an encoder's masked-LM head); None: the LM head itself."""
    objective: str = "causal"
    """``causal`` (loaded as AutoModelForCausalLM), ``masked`` (an encoder trained on
    masked-LM, loaded as AutoModelForMaskedLM) or ``seq2seq`` (an encoder–decoder,
    loaded as AutoModelForSeq2SeqLM; it needs ``decoder_blocks`` and ``encoder_norm``)."""
    decoder_blocks: str | None = None
    """Encoder–decoder models: attribute path of the decoder's blocks, first to last
    (``blocks`` are then the encoder's); None for a single stack."""
    encoder_norm: str | None = None
    """Encoder–decoder models: attribute path of the norm after the encoder's last block,
    whose output is layer L_e (``final_norm`` is the decoder's)."""
    norm_eps: float | None = None
    """The norms' epsilon, for families whose norm module does not store it."""
    norm_type: str | None = None
    """The norms' type (``layernorm`` or ``rmsnorm``), for families whose norm class name
    misleads (T5LayerNorm is an RMSNorm: no mean subtracted, no bias)."""
    hidden_states_from_first_block: bool = False
    """transformers' ``output_hidden_states`` of this family starts at the first block's
    output, not at the embeddings, and holds the last block's output before and after the
    final norm (Mamba, RWKV; ``LayerChoice.hidden_states``)."""
    requires: Mapping[str, Any] = field(default_factory=dict)
    """Config values the row assumes; a model configured otherwise is rejected."""
    whole_sequence_products: str | None = None
    """Why the family's block Jacobians under ``coupling.products: token_local`` fall back
    to whole-sequence products (about T times the work; ``layerlaws.coupling.local`` finds
    out as it runs, the planner reads it here); None: token by token."""
    whole_attention: str | None = None
    """Why its token-local re-runs keep transformers' attention over the earlier keys as
    one (``layerlaws.coupling.split_attention`` reproduces the common eager attention
    only); None: split."""


_OWN_EAGER = "its own eager attention (softmax in the model's dtype)"


def _decoder(final_norm: str = "model.norm", **facts: Any) -> Architecture:
    """A row for the common ``model.layers`` / ``model.embed_tokens`` layout."""
    return Architecture("model.layers", "model.embed_tokens", final_norm, **facts)


def _encoder(prefix: str, lm_head: str, head_input: str) -> Architecture:
    """A row for a post-LN masked-LM encoder (``<prefix>.encoder.layer`` /
    ``<prefix>.embeddings.word_embeddings``, no final norm), loaded with its masked-LM head;
    one configured as a decoder is rejected."""
    return Architecture(
        f"{prefix}.encoder.layer",
        f"{prefix}.embeddings.word_embeddings",
        None,
        lm_head=lm_head,
        head_input=head_input,
        post_ln=True,
        objective="masked",
        requires={"is_decoder": False},
        whole_sequence_products="bidirectional: a token's output depends on later tokens",
        whole_attention=_OWN_EAGER,
    )


_GPT2 = Architecture("transformer.h", "transformer.wte", "transformer.ln_f")
_OWN_MODULE = "its own attention module"
_MAMBA = Architecture(
    "backbone.layers",
    "backbone.embeddings",
    "backbone.norm_f",
    hidden_states_from_first_block=True,
    whole_sequence_products="a state-space model: no keys and values",
)

ARCHITECTURES: dict[str, Architecture] = {
    "gpt2": replace(
        _GPT2,
        whole_attention="its own eager attention (scaled by its own settings, softmax in the "
        "model's dtype)",
    ),
    "openai-gpt": Architecture(
        "transformer.h",
        "transformer.tokens_embed",
        None,
        post_ln=True,
        whole_sequence_products="its blocks take no key/value cache",
    ),
    "gpt_neo": replace(_GPT2, whole_attention=_OWN_MODULE),
    "gptj": replace(_GPT2, whole_attention=_OWN_MODULE),
    "codegen": replace(_GPT2, whole_attention=_OWN_MODULE),
    "gpt_bigcode": _GPT2,
    "gpt_neox": Architecture("gpt_neox.layers", "gpt_neox.embed_in", "gpt_neox.final_layer_norm"),
    "opt": Architecture(
        "model.decoder.layers",
        "model.decoder.embed_tokens",
        "model.decoder.final_layer_norm",
        # Post-LN OPT (opt-350m) also projects its embeddings in and out of the stream.
        requires={"do_layer_norm_before": True},
    ),
    "bloom": Architecture(
        "transformer.h",
        "transformer.word_embeddings",
        "transformer.ln_f",
        requires={"apply_residual_connection_post_layernorm": False},
        whole_sequence_products="its ALiBi bias runs over key columns, which the argument "
        "cut takes for rows",
    ),
    "falcon": Architecture(
        "transformer.h",
        "transformer.word_embeddings",
        "transformer.ln_f",
        whole_attention=_OWN_MODULE,
    ),
    "mpt": Architecture(
        "transformer.blocks", "transformer.wte", "transformer.norm_f", whole_attention=_OWN_MODULE
    ),
    "xglm": _decoder("model.layer_norm", whole_attention=_OWN_EAGER),
    "phi": _decoder("model.final_layernorm"),
    "jamba": _decoder(
        "model.final_layernorm",
        whole_sequence_products="its Mamba layers keep a convolution and SSM state (its "
        "attention layers alone are re-run token by token)",
    ),
    "recurrent_gemma": _decoder(
        "model.final_norm",
        whole_sequence_products="its recurrent layers keep a state (its attention layers "
        "alone are re-run token by token)",
    ),
    "olmo": _decoder(norm_eps=1e-5),  # OlmoLayerNorm has eps=1e-5 built into its forward
    **{
        family: _decoder()
        for family in (
            "llama",
            "mistral",
            "mixtral",
            "qwen2",
            "qwen2_moe",
            "qwen3",
            "qwen3_moe",
            "phi3",
            "gemma",
            "gemma2",
            "gemma3_text",
            "olmo2",
            "stablelm",
            "starcoder2",
            "cohere",
            "granite",
            "smollm3",
        )
    },
    "mamba": _MAMBA,
    "mamba2": _MAMBA,
    "falcon_mamba": _MAMBA,
    "rwkv": Architecture(
        "rwkv.blocks",
        "rwkv.embeddings",
        "rwkv.ln_out",
        lm_head="head",
        hidden_states_from_first_block=True,
        whole_sequence_products="a recurrent model: no keys and values",
    ),
    "bert": _encoder("bert", lm_head="cls.predictions.decoder", head_input="cls"),
    "roberta": _encoder("roberta", lm_head="lm_head.decoder", head_input="lm_head"),
    # T5 (Raffel et al. 2020): layers 0..L_e the encoder's (L_e after its final norm),
    # L_e + j the output of decoder block j (L after the decoder's final norm, before the
    # d^-0.5 scaling of tied embeddings): 2 + 2 blocks give layers 0..4.
    "t5": Architecture(
        "encoder.block",
        "shared",
        "decoder.final_layer_norm",
        objective="seq2seq",
        decoder_blocks="decoder.block",
        encoder_norm="encoder.final_layer_norm",
        norm_type="rmsnorm",
    ),
}


STACKS = ("both", "encoder", "decoder")
"""The values of ``LayerChoice.stack``."""


@dataclass(frozen=True)
class LayerChoice:
    """Which of a model's states are its layers 0..L (``layerlaws.models.blocks.layer_states``)."""

    stack: str = "both"
    """An encoder–decoder's stacks whose states are layers: ``both``, the encoder's then
    its decoder blocks' outputs (L = L_e + L_d, the numbering above); ``encoder``, the
    encoder's alone (L = L_e: layer 0 its embeddings, L_e its output after its final norm,
    as transformers' ``encoder_hidden_states``), run without the decoder; ``decoder``, the
    decoder's alone (L = L_d: layer 0 what decoder block 1 receives, its embeddings of what
    it reads, L_d its output after its final norm, as transformers'
    ``decoder_hidden_states``). A model of one stack takes ``both``."""
    hidden_states: bool = False
    """Number the layers as transformers' ``output_hidden_states`` does, as He & Su's
    released code reads them, for the families whose row says
    ``hidden_states_from_first_block``: layer l < L − 1 the output of block l + 1 (what
    block l + 2 receives), layer L − 1 the last block's output (what the final norm
    receives), layer L what the LM head receives; no layer is the embeddings. Other
    families' layers are the same either way."""

    def __post_init__(self) -> None:
        if self.stack not in STACKS:
            raise LayerlawsError(f"a layer choice's stack is one of {STACKS}, not {self.stack!r}")


BLOCK_INPUTS = LayerChoice()
"""The default choice: every block's input and the LM head's, both stacks of an
encoder–decoder."""


def layer_count(model: torch.nn.Module, choice: LayerChoice) -> int:
    """L of the layers 0..L that ``choice`` takes of ``model``; a LayerlawsError for one
    stack of a model that has only one."""
    architecture = architecture_of(model.config)
    if choice.stack == "both":
        return len(blocks_of(model))
    if architecture.decoder_blocks is None:
        raise LayerlawsError(
            f"a {model.config.model_type!r} model has one stack of blocks: its layers cannot "
            f"be its {choice.stack}'s alone"
        )
    stack = architecture.blocks if choice.stack == "encoder" else architecture.decoder_blocks
    return len(module_at(model, stack))


def architecture_of(config: Any) -> Architecture:
    """The row of ``config.model_type``; a LayerlawsError names an unknown family or a
    configuration the row does not cover."""
    family = config.model_type
    if family not in ARCHITECTURES:
        raise LayerlawsError(
            f"model type {family!r} is not in the architecture table; layerlaws measures "
            f"only families it knows where to find the blocks, embeddings and final norm of. "
            f"Add a row to ARCHITECTURES in layerlaws/models/architectures.py (known: "
            f"{', '.join(sorted(ARCHITECTURES))})"
        )
    architecture = ARCHITECTURES[family]
    for key, expected in architecture.requires.items():
        value = getattr(config, key, None)
        if value != expected:
            raise LayerlawsError(
                f"model type {family!r} with {key}={value!r} is not supported: the "
                f"architecture table's row assumes {key}={expected!r}"
            )
    return architecture


def module_at(model: torch.nn.Module, path: str) -> Any:
    """The submodule (or module list) at a dotted attribute path, or a LayerlawsError."""
    try:
        return attrgetter(path)(model)
    except AttributeError:
        raise LayerlawsError(
            f"{type(model).__name__} has no module {path!r}, where the architecture table "
            f"puts it for model type {model.config.model_type!r}; the row needs updating "
            f"for this version of transformers"
        ) from None


def is_encoder_decoder(model_type: str) -> bool:
    """Whether a family in the table is an encoder–decoder (two stacks of blocks)."""
    return ARCHITECTURES[model_type].decoder_blocks is not None


def require_single_stack(model_type: str, measurement: str, instead: str) -> None:
    """A LayerlawsError when ``model_type`` is an encoder–decoder, which ``measurement``
    cannot handle; ``instead`` says what to do."""
    if model_type in ARCHITECTURES and is_encoder_decoder(model_type):
        raise LayerlawsError(
            f"{measurement} measures models of one stack of blocks (causal LMs and "
            f"encoders); a {model_type!r} model is an encoder–decoder: {instead}"
        )


def block_paths(model: torch.nn.Module) -> list[str]:
    """The module names of the model's residual blocks, first to last (an encoder–decoder's
    encoder blocks, then its decoder blocks)."""
    architecture = architecture_of(model.config)
    stacks = [architecture.blocks, architecture.decoder_blocks]
    return [
        f"{stack}.{index}"
        for stack in stacks
        if stack is not None
        for index in range(len(module_at(model, stack)))
    ]


def blocks_of(model: torch.nn.Module) -> list[torch.nn.Module]:
    """The model's residual blocks, first to last: L of them, whose layers are 0..L (an
    encoder–decoder's encoder blocks, then its decoder blocks: L = L_e + L_d)."""
    architecture = architecture_of(model.config)
    blocks = list(module_at(model, architecture.blocks))
    if architecture.decoder_blocks is not None:
        blocks += list(module_at(model, architecture.decoder_blocks))
    return blocks


def encoder_layers(model: torch.nn.Module) -> int:
    """How many of the layers are an encoder's that a decoder reads (L_e + 1: layers
    0..L_e); 0 for a model of one stack."""
    architecture = architecture_of(model.config)
    if architecture.decoder_blocks is None:
        return 0
    return len(module_at(model, architecture.blocks)) + 1


def stack_sizes(model: torch.nn.Module) -> tuple[int, int]:
    """An encoder–decoder's decoder blocks L_d and its encoder's parameters (its token
    embeddings, shared with the decoder, its blocks and its final norm, each counted once:
    transformers' ``T5EncoderModel``); (0, 0) for a model of one stack."""
    architecture = architecture_of(model.config)
    if architecture.decoder_blocks is None:
        return 0, 0
    parts = [embeddings_of(model), module_at(model, architecture.blocks)]
    parts.append(module_at(model, architecture.encoder_norm))
    encoder = {id(parameter): parameter for part in parts for parameter in part.parameters()}
    blocks = len(module_at(model, architecture.decoder_blocks))
    return blocks, sum(parameter.numel() for parameter in encoder.values())


def embeddings_of(model: torch.nn.Module) -> torch.nn.Module:
    """The token embedding module (W_E as its ``weight``, (vocab_size, hidden_size))."""
    return module_at(model, architecture_of(model.config).embeddings)


def lm_head_of(model: torch.nn.Module) -> torch.nn.Module:
    """The LM head (W_U as its ``weight``, (vocab_size, hidden_size))."""
    return module_at(model, architecture_of(model.config).lm_head)


def head_input_of(model: torch.nn.Module) -> torch.nn.Module:
    """The module whose input is layer L: the LM head, or an encoder's masked-LM head."""
    architecture = architecture_of(model.config)
    return module_at(model, architecture.head_input or architecture.lm_head)


AUTO_CLASSES = {
    "causal": "AutoModelForCausalLM",
    "masked": "AutoModelForMaskedLM",
    "seq2seq": "AutoModelForSeq2SeqLM",
}
"""The transformers auto class of each ``Architecture.objective``."""


def auto_class(model_type: str) -> Any:
    """The transformers auto class a family is loaded with (causal LM, masked LM or
    sequence-to-sequence LM; causal for a family not in the table, which is rejected once
    its config is read)."""
    import transformers

    row = ARCHITECTURES.get(model_type)
    return getattr(transformers, AUTO_CLASSES[row.objective if row else "causal"])


NORM_TYPES = {"RMSNorm": "rmsnorm", "LayerNorm": "layernorm"}
"""Norm type by what a norm module's class name contains."""
EPS_ATTRIBUTES = ("eps", "variance_epsilon", "epsilon")


def norm_module(model: torch.nn.Module) -> torch.nn.Module:
    """The module that defines the model's norm: the final norm, or (for a model without
    one) the first norm inside the first block."""
    architecture = architecture_of(model.config)
    if architecture.final_norm is not None:
        return module_at(model, architecture.final_norm)
    for module in blocks_of(model)[0].modules():
        if any(name in type(module).__name__ for name in NORM_TYPES):
            return module
    raise LayerlawsError(f"found no norm module in the first block of {type(model).__name__}")


def norm_facts(model: torch.nn.Module) -> tuple[str, float]:
    """The model's norm type (``layernorm`` or ``rmsnorm``) and epsilon, read from its norm
    module's class and attributes (the table's ``norm_type`` and ``norm_eps`` where the
    module's class misleads or it stores none)."""
    module = norm_module(model)
    name = type(module).__name__
    kinds = [kind for marker, kind in NORM_TYPES.items() if marker in name]
    import torch  # here: the table itself is read by the torch-free planner

    if isinstance(module, torch.nn.LayerNorm):
        kinds = ["layernorm"]
    stated = architecture_of(model.config).norm_type
    if stated is not None:
        kinds = [stated]
    if not kinds:
        raise LayerlawsError(
            f"cannot tell the norm type of {name} (model type {model.config.model_type!r}): "
            f"its class name contains neither 'RMSNorm' nor 'LayerNorm'"
        )
    for attribute in EPS_ATTRIBUTES:
        eps = getattr(module, attribute, None)
        if isinstance(eps, int | float):
            return kinds[0], float(eps)
    eps = architecture_of(model.config).norm_eps
    if eps is None:
        raise LayerlawsError(
            f"{name} stores no epsilon ({', '.join(EPS_ATTRIBUTES)}); give it as norm_eps in "
            f"the architecture table's row for {model.config.model_type!r}"
        )
    return kinds[0], eps
