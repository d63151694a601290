"""Configuration keys that were renamed or moved: an old key is named with its new place.

Without this table an old config would fail schema validation with "Additional
properties are not allowed", which does not say what to write instead.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

RENAMED_KEYS: dict[str, str] = {
    "datasets.*.seed": "datasets.*.sample_seed",
    "equilearning.targets": "equilearning.offsets",
    "equilearning.chunk_rows": "execution.regression_chunk_rows",
    "signatures.shard_texts": "execution.shard_texts",
    "signatures.duckdb_memory_mb": "execution.duckdb_memory_mb",
    "coupling.k": "coupling.ks",
    "coupling.random_seed": "coupling.init_seed",
    "coupling.vjp_chunk": "execution.vjp_chunk",
    "coupling.prompts.*.truncate": "coupling.prompts.*.too_long (true: truncate, false: error)",
    "plots.heatmap_tokens": "plots.signatures.heatmap_tokens",
    "execution.dtype": "models.<key>.dtype (the precision of each model)",
}
"""Old key path → where it lives now; ``*`` stands for any key of a mapping (a model, a
dataset, a prompt set)."""


def _matches(config: Any, parts: list[str], prefix: list[str]) -> list[list[str]]:
    """Concrete paths in ``config`` that match the pattern ``parts``."""
    if not parts:
        return [prefix]
    if not isinstance(config, Mapping):
        return []
    head, rest = parts[0], parts[1:]
    keys = list(config) if head == "*" else [head] if head in config else []
    return [path for key in keys for path in _matches(config[key], rest, [*prefix, str(key)])]


def renamed_key_errors(config: Mapping[str, Any]) -> list[str]:
    """One message per old key found in ``config``, naming where it lives now."""
    messages = []
    for old, new in RENAMED_KEYS.items():
        pattern = old.split(".")
        for path in _matches(config, pattern, []):
            wildcards = iter(key for key, part in zip(path, pattern, strict=True) if part == "*")
            target = "".join(next(wildcards, "*") if char == "*" else char for char in new)
            messages.append(f"config key {'.'.join(path)} was renamed: use {target}")
    return messages
