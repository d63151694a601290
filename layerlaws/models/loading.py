"""Loading a prepared model: its tokenizer, the placement of its weights, the model itself
(with its randomly initialised twin for the coupling stage) and its embedding matrices.
"""

from __future__ import annotations

import contextlib
import logging
import os
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from layerlaws.core.dtypes import torch_dtype
from layerlaws.core.errors import LayerlawsError
from layerlaws.models.architectures import (
    ARCHITECTURES,
    auto_class,
    embeddings_of,
    lm_head_of,
)
from layerlaws.models.devices import DeviceClaim, DeviceRequest
from layerlaws.models.facts import ModelFacts, read_facts, tokenizer_folder, weights_folder
from layerlaws.models.placement import check_fits, device_budgets, device_map
from layerlaws.models.preparation import skeleton_of
from layerlaws.models.quantization import (
    check_quantized,
    keep_differentiable,
    quantization_config,
)
from layerlaws.models.random_twin import randomly_initialised_twin
from layerlaws.models.weight_files import readable_safetensors

log = logging.getLogger(__name__)


def load_tokenizer(folder: str | Path) -> Any:
    """The tokenizer of a prepared model (``facts.tokenizer_folder``)."""
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(str(tokenizer_folder(folder)))


def decoder_start_token_id(folder: str | Path) -> int:
    """What a prepared encoder–decoder's decoder reads first: its config's (or generation
    config's) ``decoder_start_token_id``, else its pad token (T5's convention)."""
    from transformers import AutoConfig, GenerationConfig

    weights = str(weights_folder(folder))
    config = AutoConfig.from_pretrained(weights)
    candidates = [getattr(config, "decoder_start_token_id", None)]
    with contextlib.suppress(OSError):  # no generation_config.json
        candidates.append(GenerationConfig.from_pretrained(weights).decoder_start_token_id)
    candidates.append(getattr(config, "pad_token_id", None))
    found = next((value for value in candidates if value is not None), None)
    if found is None:
        raise LayerlawsError(
            f"the encoder–decoder in {weights} names no decoder_start_token_id nor pad token "
            f"in its config: set one there"
        )
    return int(found)


def plan_placement(
    folder: str | Path,
    dtype: str,
    devices: Sequence[str],
    budgets: Mapping[str, int] | None = None,
    quantization: str = "none",
) -> str | dict[str, str]:
    """Where a prepared model's weights (in ``dtype``, or under ``quantization``) go on
    ``devices``: the device itself, or for several a device map that spreads its blocks
    over them within ``budgets`` (bytes of weights per device; by default from the GPUs'
    free memory). Planned on a skeleton, so a model that does not fit stops with a
    LayerlawsError before anything is loaded."""
    from transformers import AutoConfig

    skeleton = skeleton_of(AutoConfig.from_pretrained(str(weights_folder(folder))), False)
    if len(devices) == 1:
        check_fits(skeleton, torch_dtype(dtype), devices[0], quantization)
        return devices[0]
    budgets = budgets or device_budgets(devices)
    return device_map(skeleton, torch_dtype(dtype), budgets, quantization)


def load_model(
    folder: str | Path,
    dtype: str,
    placement: str | Mapping[str, str],
    attention: str | None = None,
    quantization: str = "none",
) -> Any:
    """A prepared model in evaluation mode, in ``dtype`` (a name of ``core.dtypes.DTYPES``),
    on one device or spread by a device map (``plan_placement``); ``attention`` picks the
    attention implementation (``eager`` for Jacobians, whose batching rules the fused kernels
    lack); ``quantization`` quantises its linear layers as they are loaded
    (``layerlaws.models.quantization``)."""
    options: dict[str, Any] = {} if attention is None else {"attn_implementation": attention}
    quantized = quantization_config(quantization, torch_dtype(dtype))
    if quantized is not None:
        options["quantization_config"] = quantized
    # Placed as they load, a shard at a time: the host never holds the whole model (and
    # quantised weights cannot be moved after).
    options["device_map"] = {"": placement} if isinstance(placement, str) else dict(placement)
    from transformers import AutoConfig

    weights = str(weights_folder(folder))
    model_type = AutoConfig.from_pretrained(weights).model_type
    with readable_safetensors(Path(weights)):
        model = auto_class(model_type).from_pretrained(weights, dtype=torch_dtype(dtype), **options)
    if quantized is not None:
        check_quantized(model, quantization)
        keep_differentiable(model)
    return model.eval().requires_grad_(False)


def placed_model(
    folder: str | Path, dtype: str, devices: Sequence[str], quantization: str = "none"
) -> Any:
    """A prepared model loaded onto the ``devices`` a job claimed (``plan_placement``, then
    ``load_model``)."""
    placement = plan_placement(folder, dtype, devices, quantization=quantization)
    return load_model(folder, dtype, placement, quantization=quantization)


@contextlib.contextmanager
def logged_claim(request: DeviceRequest, context: str = "") -> Iterator[DeviceClaim]:
    """A model job's device claim (``DeviceRequest.claim``), logged with where the job runs
    and ``context``; the devices are held until the block ends."""
    with request.claim() as claim:
        log.info(
            "running on %s (CUDA_VISIBLE_DEVICES=%r)%s",
            claim.describe(),
            os.environ.get("CUDA_VISIBLE_DEVICES"),
            context,
        )
        yield claim


@contextlib.contextmanager
def claimed_model(
    folder: str | Path,
    dtype: str,
    quantization: str,
    request: DeviceRequest,
    context: str = "",
) -> Iterator[tuple[Any, DeviceClaim]]:
    """A model job's claim–place–load: claim the devices of ``request`` (``logged_claim``,
    with ``context``) and load the prepared model in ``folder`` onto them
    (``placed_model``). Yields (model, claim); the devices are held until the block ends."""
    with logged_claim(request, context) as claim:
        yield placed_model(folder, dtype, claim.devices, quantization), claim


def coupling_twins(
    folder: str | Path,
    initial: str | Path | None,
    dtype: str,
    placement: str | Mapping[str, str],
    init_seed: int,
    quantization: str = "none",
) -> dict[str, Any]:
    """The weights coupling compares, loaded with eager attention (under ``quantization``):
    ``trained`` (the model in ``folder``) and ``random`` — the prepared model in
    ``initial`` (a training's step-0 checkpoint) when given, else a fresh random twin
    seeded by ``init_seed``."""
    trained = load_model(folder, dtype, placement, "eager", quantization)
    if initial is not None:
        untrained = load_model(initial, dtype, placement, "eager", quantization)
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
        with readable_safetensors(folder), safe_open(str(path), framework="pt") as stored:
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
