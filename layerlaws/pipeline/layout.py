"""The results folder: every path the workflow reads or writes, built from one root.

The workflow's own folders (samples, prepared models, tokens, kept hidden states, logs) are
methods here; each stage with outputs of its own declares its paths in its package
(``PATHS`` of ``layerlaws.<stage>.workflow``, listed by ``Stage.paths``), and a ``Layout``
method of the same name fills them: ``Layout().coupling("smollm2", "paper")``. Each method
takes the keys of what it names (a model, a dataset, a prompt set…), in the order the
pattern has them, and defaults them to Snakemake wildcards (``{model}``, ``{dataset}``…), so
the same method gives a rule's output pattern and a concrete path.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass

from layerlaws.models.metadata import MODEL_METADATA
from layerlaws.pipeline.stages import STAGES

MODEL = "{model}"
DATASET = "{dataset}"
STAGE_PATHS = {name: pattern for stage in STAGES for name, pattern in stage.paths.items()}
"""Every stage's declared path pattern, relative to the root, by name."""
WILDCARD = re.compile(r"\{(\w+)\}")


@dataclass(frozen=True)
class Layout:
    """The folders and files under ``root`` (a path relative to the working directory)."""

    root: str = "results"

    def __getattr__(self, name: str) -> Callable[..., str]:
        """A stage's declared path (``STAGE_PATHS``) as a method of its keys."""
        if name not in STAGE_PATHS:
            raise AttributeError(f"{type(self).__name__} has no path {name!r}")
        return lambda *keys: self.path(STAGE_PATHS[name], *keys)

    def path(self, pattern: str, *keys: object) -> str:
        """``pattern`` under the root, its wildcards filled with ``keys`` in order (those
        not given left as wildcards)."""
        names = WILDCARD.findall(pattern)
        if len(keys) > len(names):
            raise TypeError(f"{pattern!r} takes {len(names)} keys, {len(keys)} given")
        values = {name: str(key) for name, key in zip(names, keys, strict=False)}
        filled = WILDCARD.sub(lambda place: values.get(place.group(1), place.group(0)), pattern)
        return f"{self.root}/{filled}"

    # The workflow's own: samples, prepared models, tokens, kept hidden states.
    def sentences(self, dataset: str = DATASET) -> str:
        """A dataset's sampled texts."""
        return f"{self.root}/corpus/{dataset}/sentences.parquet"

    def model(self, model: str = MODEL) -> str:
        """A prepared model's folder."""
        return f"{self.root}/models/{model}"

    def model_download(self, model: str = MODEL) -> str:
        """The record of a hub model's download into the Hugging Face cache (its snapshot
        and commit), which its preparation reads."""
        return f"{self.root}/downloads/{model}.json"

    def model_facts(self, model: str = MODEL) -> str:
        """A prepared model's facts file."""
        return f"{self.model(model)}/{MODEL_METADATA}"

    def tokens(self, model: str = MODEL, dataset: str = DATASET) -> str:
        """A dataset's sample tokenised by a model's tokenizer."""
        return f"{self.root}/tokens/{model}/{dataset}.parquet"

    def hidden(self, model: str = MODEL, dataset: str = DATASET) -> str:
        """A run's kept hidden states (``hidden_states.keep``)."""
        return f"{self.root}/hidden/{model}/{dataset}"

    # Logs.
    def log(self, rule: str, *keys: str) -> str:
        """The log of a job of ``rule``, named by its ``keys`` (wildcard patterns)."""
        return "/".join((f"{self.root}/logs/{rule}", *keys)) + ".log"

    def folders(self) -> dict[str, str]:
        """Every folder's pattern (wildcards unfilled), by method name: the workflow's own
        and the stages' (a declared path without a file suffix)."""
        own = {name: getattr(self, name)() for name in ("model", "hidden")}
        return own | {
            name: self.path(pattern)
            for name, pattern in STAGE_PATHS.items()
            if "." not in pattern.rsplit("/", 1)[-1]
        }

    def files(self) -> dict[str, str]:
        """Every file's pattern (wildcards unfilled), by method name."""
        own = {
            name: getattr(self, name)()
            for name in ("sentences", "model_download", "model_facts", "tokens")
        }
        return own | {
            name: self.path(pattern)
            for name, pattern in STAGE_PATHS.items()
            if "." in pattern.rsplit("/", 1)[-1]
        }
