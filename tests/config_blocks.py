"""The default config (config.yaml) validated against the schema, its defaults filled in,
as the rules read it: the blocks the stage settings are built from."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml
from snakemake.iocontainers import Params
from snakemake.utils import validate

from layerlaws.core.settings import SCHEMA_FILE

ROOT = Path(__file__).parents[1]


def validated_block(name: str) -> dict[str, Any]:
    """The config block ``name`` of config.yaml, validated and with its defaults."""
    config = yaml.safe_load((ROOT / "config.yaml").read_text())
    validate(config, str(SCHEMA_FILE))
    return config[name]


def rule_params(**values: Any) -> Params:
    """A rule's params as Snakemake hands them to a script."""
    return Params(fromdict=values)
