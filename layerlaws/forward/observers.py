"""The observer interface (torch-free): a statistic of every layer's states streamed from
the model pass (``layerlaws.forward.model_pass.run_forward_pass``) without keeping the
states, sharded, resumed, planned and written like the built-in ones. A researcher writes
a class with the methods below in their own module and names it in the config
(``equilearning.observers``) or hands it to the API (``layerlaws.api.equilearning_law``,
``observers=``); ``docs/observers.md`` has a worked example. The built-in geometry
observer (``layerlaws.geometry``) is named and built the same way.

**Built.** ``cls(settings, num_layers)``: ``settings`` is the config entry's ``settings``
mapping as YAML reads it (dicts, lists, numbers, strings), or ``cls.settings_class(
**settings)`` when the class names a ``settings_class`` (a dataclass that checks them,
say); ``num_layers`` is L: the pass shows layers 0..L, every block's input and the LM
head's (layer 0 the embeddings; ``layerlaws.models.architectures.LayerChoice``).

**Per batch** of sequences the pass calls ``begin_batch(batch)`` (a
``layerlaws.forward.model_pass.Batch``), then ``observe(layer, states)`` for layer = 0..L
in order. The rows of ``states`` are the batch's observed tokens in the order of
``batch.rows`` (a polars table: ``sentence_id``, ``position``, ``token_id``,
``is_target``), with ``batch.row_numbers`` (numpy int64: each row's number among all rows
of the pass, the same in every shard), ``batch.batch_index`` and ``batch.position_index``
(torch int64: its sequence in the batch, its position). Only text tokens are rows: never
padding, nor special tokens (BOS, EOS) unless ``equilearning.special_tokens: include``;
under masked-LM probing ``is_target`` marks the masked rows. ``states`` is (n_rows,
hidden_size) in the model's compute dtype (float32, bfloat16, …), on the device that
layer runs on (a model spread over GPUs hands layers on several devices); it is the
pass's tensor: copy what you keep (``states.to(torch.float64)`` copies). ``observe``
must either complete or change nothing: when the device runs out of memory the batch is
split in halves, and ``begin_batch`` and ``observe`` are called again with each half from
the first layer this observer has not observed.

**Shards.** ``merge_(other)``: ``other`` is built alike (same settings and L) and has seen
other sequences (another shard of the pass, or a resumed save); afterwards this observer
must hold what it would hold had it seen them too. The merged table must not depend on
how the sequences were split (add sums; do not average averages).

**Resumption.** ``progress_attributes``: a tuple naming the attributes that hold what it
has merged. A pass saves them with ``torch.save`` as they are (tensors on their device,
dicts, numbers) every ``execution.checkpoint_minutes``, and so does a shard job; a rerun,
or the merge of shards, sets them with ``setattr`` on a freshly built observer. Anything
else must follow from the settings and L.

**Table.** ``table() -> polars.DataFrame``, once the pass (or the merge) is done: the
pipeline writes it to ``results/equilearning/<model>/<dataset>/observers/<name>.csv``
atomically, the API returns it in ``Law.observers[name]``.

**Costs** (optional, for ``snakemake estimate`` and each job's memory): static methods
``bytes_on_device(settings, *, hidden_size, num_layers, batch_tokens, dtype_bytes,
tokens_per_text) -> int``, all it holds on the devices while a batch of ``batch_tokens``
rows passes, and ``flops_per_token(settings, *, hidden_size, num_layers,
tokens_per_text) -> float``, over all layers; ``settings`` as the class receives them.
Without them the observer is planned as nothing and the workflow logs that it is
unplanned.

**Named** ``package.module:Class`` (importable: installed, or on ``PYTHONPATH``) or
``path/to/file.py:Class`` (relative to the working directory, Snakemake's
``--directory``). The workflow imports the class when it starts, to check it and read its
costs: keep its module's top-level imports light if dry runs should stay quick.
"""

from __future__ import annotations

import functools
import hashlib
import importlib
import importlib.util
import logging
import sys
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

from layerlaws.core.errors import LayerlawsError

if TYPE_CHECKING:
    import polars as pl
    import torch

    from layerlaws.forward.model_pass import Batch

log = logging.getLogger(__name__)

REQUIRED_METHODS = ("begin_batch", "observe", "merge_", "table")
"""What a named observer's class must define (besides ``progress_attributes``)."""


class Observer(Protocol):
    """Receives the states of a forward pass (see the module docstring)."""

    progress_attributes: tuple[str, ...]
    """The attributes holding what the observer has merged: saved and restored as they
    are (tensors on their device) when a pass is resumed."""

    def begin_batch(self, batch: Batch) -> None:
        """The rows the next ``observe`` calls hold, in order."""

    def observe(self, layer: int, states: torch.Tensor) -> None:
        """States of layer ``layer`` (n_text, hidden_size) of the current batch; must
        either complete or change nothing (it may be called again after an out-of-memory
        error)."""

    def merge_(self, other: Any) -> None:
        """Merge what ``other`` (an observer built alike, of a pass over other sequences:
        another shard) has merged, as if this observer had seen its rows too."""


class LogitObserver(Protocol):
    """Receives the output logits of a forward pass."""

    progress_attributes: tuple[str, ...]
    """As ``Observer.progress_attributes``."""

    def begin_batch(self, batch: Batch) -> None:
        """The rows the next ``observe_logits`` call holds, in order."""

    def observe_logits(self, logits: torch.Tensor) -> None:
        """Logits (n_text, vocab_size) of the current batch's rows; must either complete
        or change nothing."""

    def merge_(self, other: Any) -> None:
        """As ``Observer.merge_``."""


class NamedObserver(Observer, Protocol):
    """An observer named in the config or handed to the API: one table of its own."""

    def table(self) -> pl.DataFrame:
        """What it measured, once every batch (and shard) is in."""


def progress_of(observer: Observer | LogitObserver) -> dict[str, Any]:
    """What ``observer`` has merged: its ``progress_attributes`` by name."""
    return {name: getattr(observer, name) for name in observer.progress_attributes}


def restore(observer: Observer | LogitObserver, progress: dict[str, Any]) -> None:
    """Set what ``observer`` has merged to ``progress`` (``progress_of`` another)."""
    for name, value in progress.items():
        setattr(observer, name, value)


@dataclass(frozen=True)
class ObserverSpec:
    """A named observer of a pass: its name, its class and its settings."""

    name: str
    """Its table's name (``observers/<name>.csv``)."""
    source: str | type
    """Its class: ``package.module:Class``, ``path/to/file.py:Class`` or the class itself."""
    settings: Mapping[str, Any] = field(default_factory=dict)
    """Its settings as the config gives them."""
    key: str = "observers"
    """The config key that names it, in errors (``equilearning.observers[0]``)."""
    declared: type | None = None
    """A torch-free class with the observer's ``settings_class`` and costs, read instead of
    the class for planning (a built-in's: the workflow plans without torch); None: the
    class itself."""
    settings_key: str | None = None
    """Where the settings are in the config, in errors (a built-in's own block); None:
    ``<key>.settings``."""

    def observer_class(self) -> type:
        """The class, imported and checked (``load_observer_class``)."""
        if isinstance(self.source, str):
            return load_observer_class(self.source, self.key)
        check_observer_class(self.source, self.key)
        return self.source

    def typed_settings(self, cls: type | None = None) -> Any:
        """The settings as the class receives them: ``settings_class(**settings)`` when
        ``cls`` (the declaration, else the class) names one, else a dict."""
        cls = cls or self.declared or self.observer_class()
        settings_class = getattr(cls, "settings_class", None)
        if settings_class is None:
            return dict(self.settings)
        try:
            return settings_class(**self.settings)
        except (TypeError, ValueError, LayerlawsError) as error:
            where = self.settings_key or f"{self.key}.settings"
            raise LayerlawsError(f"{where}: {error}") from None

    def build(self, num_layers: int) -> NamedObserver:
        """A fresh observer of layers 0..``num_layers``."""
        cls = self.observer_class()
        return cls(self.typed_settings(cls), num_layers)

    def needs(
        self,
        *,
        hidden_size: int,
        num_layers: int,
        batch_tokens: int,
        dtype_bytes: int,
        tokens_per_text: int,
    ) -> tuple[int, float]:
        """(bytes on the devices, floating-point operations per token) the observer
        declares; 0 for what it does not (logged once)."""
        cls = self.declared or self.observer_class()
        settings = self.typed_settings(cls)
        shape = {"hidden_size": hidden_size, "num_layers": num_layers}
        device_bytes = flops = 0
        if hasattr(cls, "bytes_on_device"):
            device_bytes = int(
                cls.bytes_on_device(
                    settings,
                    **shape,
                    batch_tokens=batch_tokens,
                    dtype_bytes=dtype_bytes,
                    tokens_per_text=tokens_per_text,
                )
            )
        else:
            _unplanned(self.name, "bytes_on_device", "memory")
        if hasattr(cls, "flops_per_token"):
            flops = float(cls.flops_per_token(settings, **shape, tokens_per_text=tokens_per_text))
        else:
            _unplanned(self.name, "flops_per_token", "time")
        return device_bytes, flops

    def params(self) -> dict[str, Any]:
        """What a rule's ``observers`` param holds of it (so that changing its class or
        settings reruns the pass): ``name``, ``class``, ``settings``."""
        if not isinstance(self.source, str):
            raise LayerlawsError(
                f"{self.key}: the workflow names an observer's class by 'module:Class' or "
                f"'file.py:Class', not a class object"
            )
        return {"name": self.name, "class": self.source, "settings": dict(self.settings)}

    @classmethod
    def from_params(cls, entry: Mapping[str, Any], key: str) -> ObserverSpec:
        """The spec of a rule's ``observers`` param entry (``params``)."""
        return cls(entry["name"], entry["class"], entry["settings"], key)

    def source_file(self) -> str | None:
        """The file that defines the class (a path as written, or the module's origin),
        so that editing it reruns the pass; None for a class object or a module without
        a file."""
        if not isinstance(self.source, str):
            return None
        module = self.source.rpartition(":")[0]
        if module.endswith(".py"):
            return module
        try:
            found = importlib.util.find_spec(module)
        except (ImportError, ValueError):
            found = None
        return found.origin if found is not None and found.has_location else None


@functools.cache
def _unplanned(name: str, method: str, what: str) -> None:
    log.warning(
        "observer %s declares no %s: its %s is not planned (counted as 0)", name, method, what
    )


def load_observer_class(source: str, key: str) -> type:
    """The class named ``package.module:Class`` or ``path/to/file.py:Class`` (the path
    relative to the working directory), imported and checked (``check_observer_class``).
    Raises a LayerlawsError naming ``key`` when the module, the file, the class or a
    required method is missing, or the module fails to import."""
    module_name, _, class_name = source.rpartition(":")
    if not module_name or not class_name.isidentifier():
        raise LayerlawsError(
            f"{key}.class is {source!r}; name a class as 'package.module:Class' or "
            f"'path/to/file.py:Class'"
        )
    if module_name.endswith(".py"):
        module = _file_module(Path(module_name), key)
    else:
        try:
            module = importlib.import_module(module_name)
        except ModuleNotFoundError as error:
            if error.name is not None and module_name.startswith(error.name):
                raise LayerlawsError(
                    f"{key}.class: no module {module_name!r} to import; install it, put its "
                    f"folder on PYTHONPATH or name its file ('path/to/file.py:{class_name}')"
                ) from None
            raise LayerlawsError(f"{key}.class: importing {module_name} failed: {error}") from None
        except Exception as error:
            raise LayerlawsError(f"{key}.class: importing {module_name} failed: {error}") from None
    cls = getattr(module, class_name, None)
    if not isinstance(cls, type):
        raise LayerlawsError(f"{key}.class: {module_name} defines no class {class_name!r}")
    check_observer_class(cls, key)
    return cls


def check_observer_class(cls: type, key: str) -> None:
    """Raise a LayerlawsError naming ``key`` unless ``cls`` has the methods of a named
    observer (``REQUIRED_METHODS``) and a ``progress_attributes`` tuple of names."""
    missing = [name for name in REQUIRED_METHODS if not callable(getattr(cls, name, None))]
    attributes = getattr(cls, "progress_attributes", None)
    if not isinstance(attributes, tuple) or not all(isinstance(a, str) for a in attributes):
        missing.append("progress_attributes (a tuple of attribute names)")
    if missing:
        raise LayerlawsError(
            f"{key}.class: {cls.__name__} lacks {', '.join(missing)} of an observer "
            f"(layerlaws.forward.observers)"
        )


def _file_module(path: Path, key: str) -> Any:
    """The module of the Python file at ``path`` (relative to the working directory),
    imported once under a name of its own (so that a save naming it reads back)."""
    if not path.is_file():
        raise LayerlawsError(
            f"{key}.class: no file {path} (a path is read from the working directory, {Path.cwd()})"
        )
    resolved = path.resolve()
    name = "layerlaws_observer_" + hashlib.sha256(str(resolved).encode()).hexdigest()[:12]
    if name in sys.modules:
        return sys.modules[name]
    spec = importlib.util.spec_from_file_location(name, resolved)
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    try:
        spec.loader.exec_module(module)
    except Exception as error:
        del sys.modules[name]
        raise LayerlawsError(f"{key}.class: importing {path} failed: {error}") from None
    return module
