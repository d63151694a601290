"""Configuration keys that were renamed, moved or removed: an old key is named with its
new place, or why it is gone.

Without this table an old config would fail schema validation with "Additional
properties are not allowed", which does not say what to write instead.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

RENAMED_KEYS: dict[str, str] = {
    "datasets.*.seed": "datasets.*.sample_seed",
    "equilearning.targets": "equilearning.offsets",
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

REMOVED_KEYS: dict[str, str] = {
    "equilearning.chunk_rows": "the statistics are streamed from the forward pass; there "
    "is no separate regression to chunk",
}
"""Old key path → why it is gone."""


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
    """One message per old key found in ``config``, naming where it lives now (or why it
    is gone)."""
    messages = [
        f"config key {'.'.join(path)} was removed: {reason}; delete it"
        for old, reason in REMOVED_KEYS.items()
        for path in _matches(config, old.split("."), [])
    ]
    for old, new in RENAMED_KEYS.items():
        pattern = old.split(".")
        for path in _matches(config, pattern, []):
            wildcards = iter(key for key, part in zip(path, pattern, strict=True) if part == "*")
            target = "".join(next(wildcards, "*") if char == "*" else char for char in new)
            messages.append(f"config key {'.'.join(path)} was renamed: use {target}")
    return messages
