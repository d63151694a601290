"""Weights quantised by bitsandbytes as they are loaded (``models.<key>.quantization``).

``nf4``: 4-bit NormalFloat in blocks of 64 weights with a float32 scale each (Dettmers et
al. 2023, QLoRA); ``fp4``: bitsandbytes' 4-bit float in the same blocks, what
``load_in_4bit=True`` quantises to when no quantisation type is given (transformers'
``BitsAndBytesConfig`` defaults ``bnb_4bit_quant_type`` to ``fp4``), as Aubry et al.'s
released demo loads its models (their Appendix A.6: the 7B–13B models quantised for the
Jacobians); ``int8``: LLM.int8() (Dettmers et al. 2022). Every linear layer but the output
embeddings is quantised (transformers' choice); the rest of the model stays in the
model's ``dtype``, which is also the dtype the quantised layers compute in. A Jacobian of a
quantised block is that of the dequantised weights (bitsandbytes differentiates its
layers with respect to their inputs, twice for the matrix-free path's JVPs).

The setting is one value for every job that loads the model's weights, or one per stage:
``{passes: none, coupling: nf4}`` (``passes``: the equi-learning pass and ``extract_hidden``).
Torch-free at import: the planner sizes quantised weights (``WEIGHT_BYTES``).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from layerlaws.core.errors import LayerlawsError

QUANTIZATIONS = ("none", "nf4", "fp4", "int8")
FOUR_BIT = ("nf4", "fp4")
"""The 4-bit quantisations: bitsandbytes' ``bnb_4bit_quant_type`` of the same name."""
STAGES = ("passes", "coupling")
WEIGHT_BYTES = {"nf4": 0.5 + 4 / 64, "fp4": 0.5 + 4 / 64, "int8": 1.0 + 4 / 4096}
"""Bytes per quantised weight, its block's (nf4, fp4) or row's (int8, at a width of 4,096)
float32 scale included."""


def stage_quantization(model: Mapping[str, Any], stage: str) -> str:
    """The quantisation of a model's config entry in ``stage`` (one of ``STAGES``)."""
    setting = model.get("quantization", "none")
    return setting if isinstance(setting, str) else setting.get(stage, "none")


def bitsandbytes() -> Any:
    """The bitsandbytes module; a LayerlawsError that says what to do when it is missing."""
    try:
        import bitsandbytes
    except ImportError as error:
        raise LayerlawsError(
            f"models.<key>.quantization needs bitsandbytes, which cannot be imported "
            f"({error}): pip install 'layerlaws[quantization]', or set quantization: none"
        ) from None
    return bitsandbytes


def quantization_config(quantization: str, dtype: Any) -> Any:
    """transformers' ``BitsAndBytesConfig`` of ``quantization`` computing in ``dtype`` (a
    torch dtype), or None for ``none``."""
    if quantization == "none":
        return None
    bitsandbytes()
    from transformers import BitsAndBytesConfig

    if quantization in FOUR_BIT:
        return BitsAndBytesConfig(
            load_in_4bit=True, bnb_4bit_quant_type=quantization, bnb_4bit_compute_dtype=dtype
        )
    return BitsAndBytesConfig(load_in_8bit=True)


def quantized_modules(model: Any) -> list[str]:
    """Names of the modules of ``model`` that bitsandbytes quantised."""
    if model.config.to_dict().get("quantization_config") is None:
        return []
    nn = bitsandbytes().nn
    kinds = (nn.Linear4bit, nn.Linear8bitLt)
    return [name for name, module in model.named_modules() if isinstance(module, kinds)]


def check_quantized(model: Any, quantization: str) -> None:
    """A LayerlawsError when ``quantization`` is set but no layer of ``model`` was
    quantised (a family whose layers bitsandbytes does not replace)."""
    if quantization != "none" and not quantized_modules(model):
        raise LayerlawsError(
            f"bitsandbytes quantised no layer of this {model.config.model_type!r} model "
            f"(models.<key>.quantization: {quantization}); set quantization: none for it"
        )


def keep_differentiable(model: Any) -> Any:
    """``model`` with bitsandbytes' CPU inference packing of 4-bit weights turned off: on a
    CPU with AVX-512 BF16, the first forward pass without gradients repacks the weights
    for a kernel that autograd cannot differentiate (every later Jacobian product through
    them would be wrong, or fail), so the coupling stage's products need them unpacked."""
    linear4bit = bitsandbytes().nn.Linear4bit
    for module in model.modules():
        if isinstance(module, linear4bit):
            module.support_avx512bf16_for_cpu = False
    return model


def quantize_like(twin: Any, model: Any, within: str = "") -> Any:
    """``twin`` (an unquantised model of ``model``'s architecture, on the CPU) with the
    modules that are quantised in ``model`` (those in its module ``within``, by default
    all) replaced by quantised ones of the same kind holding the twin's weights; they are
    quantised when they are moved to their device. The host's generator is left as it was
    (a new layer draws its own weights as it is built)."""
    import torch

    nn = bitsandbytes().nn
    modules = dict(model.named_modules())
    inside = [
        name
        for name in quantized_modules(model)
        if not within or name == within or name.startswith(within + ".")
    ]
    with torch.random.fork_rng(devices=[]):
        for name in inside:
            linear, like = twin.get_submodule(name), modules[name]
            shape = (linear.in_features, linear.out_features, linear.bias is not None)
            if isinstance(like, nn.Linear4bit):
                quantized = nn.Linear4bit(
                    *shape,
                    compute_dtype=like.compute_dtype,
                    compress_statistics=like.weight.compress_statistics,
                    quant_type=like.weight.quant_type,
                    quant_storage=like.weight.quant_storage,
                )
            else:
                quantized = nn.Linear8bitLt(
                    *shape, has_fp16_weights=False, threshold=like.state.threshold
                )
            quantized.load_state_dict(linear.state_dict())
            parent, _, child = name.rpartition(".")
            setattr(twin.get_submodule(parent) if parent else twin, child, quantized)
    return keep_differentiable(twin)
