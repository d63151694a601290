"""Which weights a checkpoint holds, and whether a model's LM head is among them.

A model loaded with a head its checkpoint lacks gets that head randomly initialised: a
sentence encoder saved as a bare ``BertModel`` (all-MiniLM-L6-v2) has no masked-LM
transform, so ``BertForMaskedLM`` would read its stream through random weights. Such a
model's facts say ``lm_head_trained: false``.
"""

from __future__ import annotations

import json
import re
from collections.abc import Set
from pathlib import Path
from typing import Any

from layerlaws.core.errors import LayerlawsError
from layerlaws.models.architectures import architecture_of
from layerlaws.models.weight_files import readable_safetensors

WEIGHT_FILES = (
    ("model.safetensors.index.json", "*.safetensors"),
    ("pytorch_model.bin.index.json", "pytorch_model*.bin"),
)
"""(index of a sharded checkpoint, pattern of its weight files), in the order transformers
prefers them."""


def _file_keys(path: Path) -> set[str]:
    if path.suffix == ".safetensors":
        from safetensors import safe_open

        with safe_open(str(path), framework="pt") as stored:
            return set(stored.keys())
    import torch

    return set(torch.load(path, map_location="meta", weights_only=True, mmap=True))


def checkpoint_keys(folder: Path) -> set[str]:
    """The names of the tensors stored in a model folder (safetensors or PyTorch ``.bin``
    weights, sharded or not), read without loading the tensors; a damaged safetensors file
    is a LayerlawsError naming it."""
    for index, pattern in WEIGHT_FILES:
        if (folder / index).is_file():
            return set(json.loads((folder / index).read_text())["weight_map"])
        files = sorted(folder.glob(pattern))
        if files:
            with readable_safetensors(folder):
                return set().union(*(_file_keys(path) for path in files))
    raise LayerlawsError(
        f"{folder} holds no model weights (no *.safetensors or pytorch_model*.bin)"
    )


def _normalised(name: str, prefix: str) -> str:
    """A tensor name as transformers matches it on loading: without the base model's
    prefix (a checkpoint of the bare ``BertModel`` lacks ``bert.``), and with the old
    ``LayerNorm.gamma``/``beta`` called ``weight``/``bias``."""
    name = name.removeprefix(f"{prefix}.") if prefix else name
    return re.sub(
        r"LayerNorm\.gamma$",
        "LayerNorm.weight",
        re.sub(r"LayerNorm\.beta$", "LayerNorm.bias", name),
    )


def lm_head_trained(model: Any, stored: Set[str]) -> bool:
    """Whether every weight of the LM head of ``model`` (loaded, or a skeleton) is among
    the tensors ``stored`` of its checkpoint. The head is the module the architecture
    table names as the head's input (an encoder's masked-LM head) or else the LM head
    itself; a weight tied to another (W_U = W_E) counts as stored when any of its names is.
    """
    architecture = architecture_of(model.config)
    head = model.get_submodule(architecture.head_input or architecture.lm_head)
    prefix = getattr(model, "base_model_prefix", "")
    names: dict[int, set[str]] = {}
    for name, parameter in model.named_parameters(remove_duplicate=False):
        names.setdefault(id(parameter), set()).add(_normalised(name, prefix))
    present = {_normalised(name, prefix) for name in stored}
    return all(names[id(parameter)] & present for parameter in head.parameters())
