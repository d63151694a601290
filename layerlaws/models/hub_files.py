"""What a hub repository really holds, as recorded beside a config (the config's
``hub_files``, e.g. ``configs/paper_hub_files.yaml``) and as the hub lists it.

A record gives, for each hub model id at each revision and subfolder, the files its
folder holds (``HubFiles``): a tokenizer or none, the weights as safetensors and as
PyTorch ``.bin`` (each absent, one file or sharded with its index), a GGUF, remote model
code. ``snakemake download`` compares it with the listing of the revision's files
(``check_listing``); the workflow's start-up checks that a model whose repository has no
tokenizer names another source for it (``tokenizer_problems``); the rehearsal builds its
stand-ins with exactly these files.

The data file is a YAML mapping with ``repositories``: a list of entries, each with
``ids`` (hub ids), ``revisions`` and ``subfolders`` (shell patterns, ``main`` and ``""``
by default), the fields of ``HubFiles``, and where the listing came from: ``verified:
true`` with its ``listing`` (an address), or ``verified: false`` with its ``basis`` (what
the entry rests on instead). The first entry that matches a model is its record.
"""

from __future__ import annotations

import fnmatch
import functools
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, fields
from pathlib import Path
from typing import Any

import yaml

from layerlaws.core.errors import LayerlawsError

WEIGHT_LAYOUTS = ("none", "single", "sharded")
"""How a repository holds one format of weights: not at all, one file, shards with an
index (``model.safetensors.index.json``, ``pytorch_model.bin.index.json``)."""
TOKENIZER_FILES = frozenset(
    {
        "tokenizer.json",
        "tokenizer_config.json",
        "tokenizer.model",
        "spiece.model",
        "vocab.json",
        "vocab.txt",
        "merges.txt",
    }
)
"""Files of which any one makes a folder hold a tokenizer (transformers' fast and slow
tokenizers' files; ``*.tiktoken`` too)."""
SKIPPED_WEIGHTS = ("consolidated*",)
"""Weights files transformers does not read (Mistral's own copy), not counted."""


@dataclass(frozen=True)
class HubFiles:
    """The files of one hub model folder (a repository's root or subfolder at a revision)."""

    tokenizer: bool
    safetensors: str
    """``WEIGHT_LAYOUTS``: the ``*.safetensors`` weights."""
    bin: str
    """``WEIGHT_LAYOUTS``: the PyTorch ``*.bin`` weights."""
    gguf: bool = False
    remote_code: bool = False
    """Whether the folder holds model code (``*.py``) for ``trust_remote_code``."""

    def read(self, trust_remote_code: bool) -> dict[str, Any]:
        """What the pipeline fetches and reads of these files (``models.downloads``):
        the tokenizer or none, the one weights format (safetensors where there are any,
        else ``.bin``) and whether it is sharded, and the model code when it is trusted.
        The other files are never fetched, so a filled cache cannot show them."""
        format_ = "safetensors" if self.safetensors != "none" else "bin"
        read: dict[str, Any] = {
            "tokenizer": self.tokenizer,
            "weights": f"{format_} ({getattr(self, format_)})",
        }
        if trust_remote_code:
            read["remote_code"] = self.remote_code
        return read


def _weights(names: list[str], suffix: str, index: str) -> str:
    """``WEIGHT_LAYOUTS`` of the files among ``names`` ending in ``suffix``."""
    found = [
        name
        for name in names
        if name.endswith(suffix) and not any(fnmatch.fnmatch(name, p) for p in SKIPPED_WEIGHTS)
    ]
    if index in names:
        return "sharded"
    return "single" if found else "none"


def files_of_listing(paths: Iterable[str], subfolder: str = "") -> HubFiles:
    """The ``HubFiles`` of the files ``paths`` (relative to the repository's root, as the
    hub lists them) directly inside ``subfolder``."""
    prefix = f"{subfolder.strip('/')}/" if subfolder.strip("/") else ""
    names = [
        path[len(prefix) :]
        for path in paths
        if path.startswith(prefix) and "/" not in path[len(prefix) :]
    ]
    return HubFiles(
        tokenizer=any(name in TOKENIZER_FILES or name.endswith(".tiktoken") for name in names),
        safetensors=_weights(names, ".safetensors", "model.safetensors.index.json"),
        bin=_weights(names, ".bin", "pytorch_model.bin.index.json"),
        gguf=any(name.endswith(".gguf") for name in names),
        remote_code=any(name.endswith(".py") for name in names),
    )


@dataclass(frozen=True)
class HubFilesEntry:
    """One entry of a data file: the models it covers and their files."""

    ids: tuple[str, ...]
    revisions: tuple[str, ...]
    subfolders: tuple[str, ...]
    files: HubFiles
    verified: bool
    listing: str | None
    basis: str | None

    def covers(self, model_id: str, revision: str, subfolder: str) -> bool:
        return (
            model_id in self.ids
            and any(fnmatch.fnmatchcase(revision, pattern) for pattern in self.revisions)
            and any(fnmatch.fnmatchcase(subfolder, pattern) for pattern in self.subfolders)
        )


def _entry(where: str, raw: Any) -> HubFilesEntry:
    """An entry of the data file, checked; a LayerlawsError naming ``where`` otherwise."""
    names = {field.name for field in fields(HubFiles)}
    known = names | {"ids", "revisions", "subfolders", "verified", "listing", "basis"}
    if not isinstance(raw, Mapping) or not raw.get("ids"):
        raise LayerlawsError(f"{where} is no mapping with ids: give ids, then the files")
    unknown = sorted(set(raw) - known)
    if unknown:
        raise LayerlawsError(f"{where} has unknown keys {unknown}; known: {sorted(known)}")
    for key in ("safetensors", "bin"):
        if raw.get(key) not in WEIGHT_LAYOUTS:
            raise LayerlawsError(f"{where}.{key} is {raw.get(key)!r}: give one of {WEIGHT_LAYOUTS}")
    if not isinstance(raw.get("tokenizer"), bool):
        raise LayerlawsError(f"{where}.tokenizer is {raw.get('tokenizer')!r}: give true or false")
    if raw.get("verified") is True and not raw.get("listing"):
        raise LayerlawsError(f"{where} is verified: give the listing it was read from")
    if raw.get("verified") is not True and not raw.get("basis"):
        raise LayerlawsError(
            f"{where} is not verified (verified: false): give the basis it rests on instead"
        )
    return HubFilesEntry(
        ids=tuple(raw["ids"]),
        revisions=tuple(raw.get("revisions") or ["main"]),
        subfolders=tuple(raw.get("subfolders") or [""]),
        files=HubFiles(**{key: raw[key] for key in names if key in raw}),
        verified=raw.get("verified") is True,
        listing=raw.get("listing"),
        basis=raw.get("basis"),
    )


@dataclass(frozen=True)
class HubFilesRecord:
    """The entries of a data file (``path``), in order."""

    path: str
    entries: tuple[HubFilesEntry, ...]

    @classmethod
    def read(cls, path: str | Path) -> HubFilesRecord:
        """The data file at ``path``; a LayerlawsError of one line when it is missing or
        an entry is malformed."""
        try:
            raw = yaml.safe_load(Path(path).read_text())
        except OSError as error:
            raise LayerlawsError(
                f"config hub_files: cannot read {path} ({error.strerror}): give the file "
                f"that records the hub repositories' files"
            ) from error
        entries = raw.get("repositories") if isinstance(raw, Mapping) else None
        if not isinstance(entries, list):
            raise LayerlawsError(
                f"{path} has no list `repositories`: see layerlaws.models.hub_files"
            )
        return cls(
            str(path),
            tuple(_entry(f"{path}: repositories[{n}]", e) for n, e in enumerate(entries)),
        )

    def files(self, source: Mapping[str, Any]) -> HubFiles:
        """The recorded files of a hub ``source`` (id, revision, subfolder); a
        LayerlawsError when no entry covers it."""
        model_id, revision, subfolder = _coordinates(source)
        for entry in self.entries:
            if entry.covers(model_id, revision, subfolder):
                return entry.files
        raise LayerlawsError(
            f"{self.path} records no files for hub {described(source)}: add an entry from the "
            f"repository's file listing on the hub"
        )


@functools.cache
def read_hub_files(path: str) -> HubFilesRecord:
    """The data file at ``path`` (``HubFilesRecord.read``), read once per process."""
    return HubFilesRecord.read(path)


def _coordinates(source: Mapping[str, Any]) -> tuple[str, str, str]:
    """(id, revision, subfolder) of a hub source, ``main`` and ``""`` by default."""
    subfolder = (source.get("subfolder") or "").strip("/")
    return source["id"], source.get("revision") or "main", subfolder


def described(source: Mapping[str, Any]) -> str:
    """``model '<id>' (revision <r>, subfolder '<s>')`` of a hub source."""
    model_id, revision, subfolder = _coordinates(source)
    inside = f", subfolder {subfolder!r}" if subfolder else ""
    return f"model {model_id!r} (revision {revision}{inside})"


def listing_differences(recorded: HubFiles, listed: HubFiles, trust_remote_code: bool) -> str:
    """What differs between the recorded and the listed files in what the pipeline reads
    (``HubFiles.read``), as ``key: recorded X, listed Y; …``; "" when nothing does."""
    read, found = recorded.read(trust_remote_code), listed.read(trust_remote_code)
    return "; ".join(
        f"{key}: recorded {read[key]}, the hub lists {found[key]}"
        for key in read
        if read[key] != found[key]
    )


def check_listing(
    record_path: str,
    source: Mapping[str, Any],
    recorded: HubFiles,
    paths: Sequence[str],
    trust_remote_code: bool = False,
) -> None:
    """Stop with one line when the files the hub lists (``paths``, relative to the
    repository's root) differ from those recorded in ``record_path`` for ``source`` in
    what the pipeline reads (``listing_differences``)."""
    listed = files_of_listing(paths, source.get("subfolder") or "")
    differences = listing_differences(recorded, listed, trust_remote_code)
    if differences:
        raise LayerlawsError(
            f"hub {described(source)} differs from its record in {record_path} ({differences}): "
            f"update the entry in {record_path} from the hub's listing (and models.<key>."
            f"tokenizer where the tokenizer changed), then download again"
        )


def tokenizer_problems(
    record: HubFilesRecord, models: Mapping[str, Mapping[str, Any]], keys: Iterable[str]
) -> list[str]:
    """A line for every hub model among ``keys`` (of ``models``) that the record does not
    cover, or whose recorded files have no tokenizer while it names no other source for
    it (``models.<key>.tokenizer``)."""
    problems = []
    for key in keys:
        settings = models[key]
        if settings["source"]["kind"] != "hub":
            continue
        try:
            files = record.files(settings["source"])
        except LayerlawsError as error:
            problems.append(f"config models.{key}: {error}")
            continue
        if not files.tokenizer and not settings.get("tokenizer"):
            problems.append(
                f"config models.{key}: hub {described(settings['source'])} holds no tokenizer "
                f"({record.path}): set models.{key.split('@')[0]}.tokenizer to the source of "
                f"the tokenizer it was trained with"
            )
    return problems
