"""Tiny stand-ins of a config's hub models and datasets, in a throw-away Hugging Face home
that the pipeline's own hub code reads offline (``HF_HUB_OFFLINE``, ``HF_DATASETS_OFFLINE``).

A hub model id becomes a tiny random model of its family (``HUB_FAMILIES``: a causal LM,
a masked LM for BERT and RoBERTa, an encoder–decoder for T5) with a word-level tokenizer
of the family's kind (each token of ``signatures.token_groups`` a token of its own),
saved as the repository's snapshot at every revision the config names (each revision its
own seed, so a series over revisions is not flat), under its ``subfolder``, with exactly
the files the config's ``hub_files`` records for it (a repository without a tokenizer
stood in without one, ``.bin`` weights where the hub has them, shards with their index),
so that the rehearsal stops where the real hub would. A model's ``tokenizer`` source is
stood in too; the stand-ins of one family share their tokenizer's vocabulary. A hub dataset
becomes a few rows of real English (the offline Wikipedia summaries) in every split the
config reads, with the config's text field and ``where`` fields, prepared in the datasets
cache as ``datasets.load_dataset`` finds a dataset it has loaded before. Rows are long
enough for the trainings that read them, after the rehearsal's division of the counts
(``layerlaws.rehearsal.counts``).
"""

from __future__ import annotations

import hashlib
import json
import math
import re
import shutil
import tempfile
from collections import defaultdict
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
from tokenizers import Tokenizer, models, pre_tokenizers, processors, trainers
from transformers import PreTrainedTokenizerFast

from layerlaws.core.errors import LayerlawsError
from layerlaws.models.architectures import auto_class
from layerlaws.models.hub_files import HubFiles, HubFilesRecord, read_hub_files
from layerlaws.rehearsal.tiny_models import tiny_config
from layerlaws.text.sources import wikipedia_summaries

HUB_FAMILIES: tuple[tuple[str, str], ...] = (
    (r"openai-gpt", "openai-gpt"),
    (r"(^|/)bert-|/bert", "bert"),
    (r"roberta", "roberta"),
    (r"(^|/)t5-|/t5", "t5"),
    (r"datablations/|gpt2", "gpt2"),
    (r"gpt-neo-", "gpt_neo"),
    (r"pythia|gpt-neox", "gpt_neox"),
    (r"llama", "llama"),
    (r"orca-2", "llama"),
    (r"mistral", "mistral"),
    (r"phi-3", "phi3"),
    (r"microsoft/phi-", "phi"),
    (r"rwkv", "rwkv"),
    (r"mamba", "mamba"),
    (r"falcon", "falcon"),
    (r"mpt-", "mpt"),
    (r"gemma", "gemma"),
    (r"qwen", "qwen2"),
    (r"smollm", "llama"),
)
"""(pattern searched in the lower-cased hub id, family): the first that matches."""
BOS_FAMILIES = frozenset({"llama", "mistral", "gemma", "phi3"})
"""Causal families whose tokenizers add BOS (the others add nothing)."""
WIDTH = 64
"""Hidden size of every stand-in: above the largest coupling K of the papers (50)."""
LAYERS = 4
"""Blocks of every stand-in (an encoder–decoder: as many in each stack)."""
POSITIONS = 2048
"""Positions of every stand-in: the longest max_tokens of the papers' datasets."""
VOCABULARY = 600
"""Words of the stand-in tokenizers (beside the special tokens)."""
SENTINELS = 100
"""T5's span-corruption sentinels <extra_id_0> … (as many as the hub's T5 has)."""
WORDS_PER_TOKEN = 0.8
"""Whitespace words per token of the word-level stand-in tokenizers (punctuation splits)."""


def hub_family(model_id: str) -> str:
    """The family of the stand-in of ``model_id``; a LayerlawsError for an id no row of
    ``HUB_FAMILIES`` matches."""
    lowered = model_id.lower()
    for pattern, family in HUB_FAMILIES:
        if re.search(pattern, lowered):
            return family
    raise LayerlawsError(
        f"no stand-in family for hub model {model_id!r}: add a row (pattern, family) to "
        f"layerlaws.rehearsal.standins.HUB_FAMILIES"
    )


@dataclass(frozen=True)
class TokenizerKind:
    """The special tokens of a family's tokenizer: the vocabulary's first ids, what each
    text is wrapped in, and the names transformers gives them."""

    specials: tuple[str, ...]
    template: str | None
    """The post-processor's template around a text ``$A`` (None: nothing added)."""
    named: dict[str, Any]


_CAUSAL_NAMES = {
    "unk_token": "<unk>",
    "bos_token": "<s>",
    "eos_token": "</s>",
    "pad_token": "<pad>",
}
TOKENIZER_KINDS = {
    "bert": TokenizerKind(
        ("[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"),
        "[CLS] $A [SEP]",
        {"unk_token": "[UNK]", "pad_token": "[PAD]", "cls_token": "[CLS]", "sep_token": "[SEP]",
         "mask_token": "[MASK]"},
    ),
    "roberta": TokenizerKind(
        ("<s>", "<pad>", "</s>", "<unk>", "<mask>"),
        "<s> $A </s>",
        {**_CAUSAL_NAMES, "mask_token": "<mask>", "cls_token": "<s>", "sep_token": "</s>"},
    ),
    "t5": TokenizerKind(
        ("<pad>", "</s>", "<unk>"),
        "$A </s>",
        {"unk_token": "<unk>", "pad_token": "<pad>", "eos_token": "</s>",
         "extra_special_tokens": [f"<extra_id_{k}>" for k in range(SENTINELS)]},
    ),
    "bos": TokenizerKind(("<unk>", "<s>", "</s>", "<pad>"), "<s> $A", _CAUSAL_NAMES),
    "plain": TokenizerKind(("<unk>", "<s>", "</s>", "<pad>"), None, _CAUSAL_NAMES),
}  # fmt: skip
"""The stand-in tokenizers' kinds: BERT's, RoBERTa's, T5's (with its sentinels), and the
causal ones that add BOS or nothing."""


def tokenizer_of(
    family: str, texts: Sequence[str], extra_tokens: Sequence[str] = ()
) -> PreTrainedTokenizerFast:
    """A word-level tokenizer trained on ``texts`` with the special tokens of ``family``'s
    kind (``TOKENIZER_KINDS``), and the strings ``extra_tokens`` as tokens of their own (matched
    before the words are split: a config's ``signatures.token_groups``, such as /a)."""
    name = family if family in TOKENIZER_KINDS else "bos" if family in BOS_FAMILIES else "plain"
    kind = TOKENIZER_KINDS[name]
    core = Tokenizer(models.WordLevel(unk_token=kind.named["unk_token"]))
    core.pre_tokenizer = pre_tokenizers.Whitespace()
    trainer = trainers.WordLevelTrainer(
        vocab_size=VOCABULARY + len(kind.specials), special_tokens=list(kind.specials)
    )
    core.train_from_iterator(texts, trainer)
    if kind.template:
        added = [token for token in kind.specials if token in kind.template.split()]
        core.post_processor = processors.TemplateProcessing(
            single=kind.template,
            special_tokens=[(token, core.token_to_id(token)) for token in added],
        )
    tokenizer = PreTrainedTokenizerFast(tokenizer_object=core, **kind.named)
    tokenizer.add_tokens(list(extra_tokens))
    return tokenizer


STANDIN_FILES = HubFiles(tokenizer=True, safetensors="single", bin="none")
"""The files of a stand-in whose repository no ``hub_files`` record covers: a tokenizer
and one safetensors file, as ``save_pretrained`` writes them."""
SHARD_SIZE = "256KB"
"""Largest shard of a sharded stand-in (a few shards for its 64-wide, 4-block model)."""
REMOTE_CODE_FILE = "configuration_standin.py"
"""The model code file of a stand-in whose repository holds some (never run: the stand-in
is a model transformers knows)."""


def _bin_name(name: str) -> str:
    """The PyTorch name of a safetensors weights file (``model-00001-of-00002.safetensors``
    → ``pytorch_model-00001-of-00002.bin``, the index's likewise)."""
    return "pytorch_" + name.replace(".safetensors", ".bin")


def save_weights(model: Any, folder: Path, files: HubFiles) -> None:
    """``model``'s config and weights saved to ``folder`` in the formats of ``files``:
    safetensors and PyTorch ``.bin`` (``torch.save`` of each safetensors file's tensors,
    as the hub's older checkpoints hold them), each absent, one file, or sharded
    (``SHARD_SIZE``) with its index."""
    from safetensors.torch import load_file

    for format_ in ("safetensors", "bin"):
        layout = getattr(files, format_)
        if layout == "none":
            continue
        with tempfile.TemporaryDirectory() as temporary:
            saved = Path(temporary)
            model.save_pretrained(
                saved, max_shard_size=SHARD_SIZE if layout == "sharded" else "50GB"
            )
            for path in sorted(saved.iterdir()):
                if format_ == "safetensors" or not path.name.startswith("model"):
                    shutil.copy2(path, folder / path.name)
                elif path.suffix == ".safetensors":
                    torch.save(load_file(path), folder / _bin_name(path.name))
                else:  # the index
                    index = json.loads(path.read_text())
                    index["weight_map"] = {k: _bin_name(v) for k, v in index["weight_map"].items()}
                    (folder / _bin_name(path.name)).write_text(json.dumps(index, indent=2))
    if files.remote_code:
        (folder / REMOTE_CODE_FILE).write_text("# stand-in of the repository's model code\n")


def save_standin(
    folder: Path,
    family: str,
    texts: Sequence[str],
    seed: int,
    extra_tokens: Sequence[str] = (),
    files: HubFiles = STANDIN_FILES,
) -> None:
    """A tiny random ``family`` model (``LAYERS`` blocks of width ``WIDTH``, weights drawn
    with ``seed``) saved to ``folder`` with exactly the files of ``files``
    (``save_weights``), its tokenizer (``tokenizer_of``, which sizes its vocabulary) among
    them only where ``files`` has one."""
    tokenizer = tokenizer_of(family, texts, extra_tokens)
    sizes: dict[str, Any] = {"hidden_size": WIDTH, "num_hidden_layers": LAYERS}
    if family == "t5":
        sizes |= {"num_decoder_layers": LAYERS, "d_model": WIDTH}
    elif family == "mpt":
        sizes |= {"max_seq_len": POSITIONS}
    elif family == "rwkv":
        sizes |= {"context_length": POSITIONS, "attention_hidden_size": WIDTH}
    elif family != "mamba":
        sizes |= {"max_position_embeddings": POSITIONS}
    if family == "gpt_neo":
        sizes["attention_types"] = [[["global", "local"], LAYERS // 2]]
    config = tiny_config(family, tokenizer, **sizes)
    torch.manual_seed(seed)
    folder.mkdir(parents=True, exist_ok=True)
    save_weights(auto_class(family).from_config(config), folder, files)
    if files.tokenizer:
        tokenizer.save_pretrained(folder)


def commit_of(model_id: str, revision: str) -> str:
    """A stand-in commit hash (40 hex digits) for ``model_id`` at ``revision``."""
    return hashlib.sha1(f"{model_id}@{revision}".encode()).hexdigest()


@dataclass(frozen=True)
class HubModel:
    """One hub repository of the config: its id, the revisions and subfolders read."""

    model_id: str
    revisions: tuple[str, ...]
    subfolders: tuple[str, ...]


def _hub_sources(config: Mapping[str, Any]) -> Iterator[tuple[str, str, str]]:
    """(id, revision, subfolder) of every hub source the config's models read: each
    model's at each of its revisions, and its tokenizer's (``models.<key>.tokenizer``)."""
    for model in config["models"].values():
        source = model["source"]
        if source.get("kind") == "hub":
            for revision in model.get("revisions") or [source.get("revision") or "main"]:
                yield source["id"], revision, source.get("subfolder") or ""
        tokenizer = model.get("tokenizer") or {}
        if tokenizer.get("kind") == "hub":
            yield (
                tokenizer["id"],
                tokenizer.get("revision") or "main",
                tokenizer.get("subfolder") or "",
            )


def hub_models(config: Mapping[str, Any]) -> list[HubModel]:
    """Every hub repository the config's models and their tokenizers read, with its
    revisions and subfolders."""
    revisions: dict[str, set[str]] = defaultdict(set)
    subfolders: dict[str, set[str]] = defaultdict(set)
    for model_id, revision, subfolder in _hub_sources(config):
        revisions[model_id].add(revision)
        subfolders[model_id].add(subfolder)
    return [
        HubModel(model_id, tuple(sorted(revisions[model_id])), tuple(sorted(subfolders[model_id])))
        for model_id in sorted(revisions)
    ]


def write_hub_model(
    cache: Path,
    model: HubModel,
    texts: Sequence[str],
    extra_tokens: Sequence[str] = (),
    record: HubFilesRecord | None = None,
) -> None:
    """The stand-in of ``model`` in the hub cache ``cache``: a snapshot per revision (a
    ref naming its commit), the model in each subfolder (``extra_tokens``: ``tokenizer_of``)
    with the files ``record`` gives for that revision and subfolder (``STANDIN_FILES``
    without a record)."""
    family = hub_family(model.model_id)
    repository = cache / f"models--{model.model_id.replace('/', '--')}"
    for number, revision in enumerate(model.revisions):
        commit = commit_of(model.model_id, revision)
        for subfolder in model.subfolders:
            coordinates = {"id": model.model_id, "revision": revision, "subfolder": subfolder}
            files = STANDIN_FILES if record is None else record.files(coordinates)
            folder = repository / "snapshots" / commit / subfolder
            save_standin(folder, family, texts, number, extra_tokens, files)
        (repository / "refs").mkdir(parents=True, exist_ok=True)
        (repository / "refs" / revision).write_text(commit)


@dataclass(frozen=True)
class RowGroup:
    """Rows of one split of a stand-in dataset: ``rows`` texts of ``words`` words at
    least, each with ``where``'s field values (none: no filter reads them)."""

    split: str
    where: tuple[tuple[str, Any], ...]
    rows: int
    words: int


@dataclass
class HubDataset:
    """One hub dataset (name and config) of the config: its text fields and row groups."""

    name: str
    config_name: str | None
    text_fields: set[str]
    groups: dict[tuple[str, tuple[tuple[str, Any], ...]], RowGroup]


PROBING_WORDS = 450
"""Words per row (at least) of a dataset no training reads: about 550 tokens, so that even
a one-text sample gives the masked-LM probe (15 % of the tokens) more
regression rows than the stand-ins' hidden size, WIDTH + 1 = 65."""


def hub_datasets(config: Mapping[str, Any]) -> list[HubDataset]:
    """Every hub dataset the (count-divided) ``config`` reads: per split and ``where``,
    rows enough for the largest sample drawn from it (twice as many, for the exclusions
    between samples, and at least 8), each long enough for the trainings that read it.
    A split filtered by ``where`` also gets rows that match no filter."""
    found: dict[tuple[str, str | None], HubDataset] = {}
    for key, dataset in config["datasets"].items():
        source = dataset["source"]
        if source.get("kind") != "hub":
            continue
        entry = found.setdefault(
            (source["name"], source.get("config")),
            HubDataset(source["name"], source.get("config"), set(), {}),
        )
        entry.text_fields.add(source.get("text_field", "text"))
        count = dataset.get("n_samples")
        rows = max(8, 2 * count) if isinstance(count, int) else 8
        split = source.get("split", "train")
        where = tuple(sorted((source.get("where") or {}).items()))
        group = RowGroup(split, where, rows, _training_words(config, key, count or rows, rows))
        entry.groups[split, where] = _larger(entry.groups.get((split, where)), group)
        if where:
            other = tuple((field, "other") for field, _ in where)
            entry.groups[split, other] = _larger(
                entry.groups.get((split, other)), RowGroup(split, other, 8, PROBING_WORDS)
            )
    return list(found.values())


def _larger(old: RowGroup | None, new: RowGroup) -> RowGroup:
    """One group with the larger rows and words of ``old`` and ``new``."""
    if old is None:
        return new
    return RowGroup(new.split, new.where, max(old.rows, new.rows), max(old.words, new.words))


SAMPLE_MARGIN = 2.0
"""A sampled training's sample holds its packed sequences twice over."""
WHOLE_SOURCE_MARGIN = 1.25
"""A whole-source training's stand-in holds its packed sequences 1.25 times over: it reads
every one (1 or 2 a step where it has a sequence a step; twice over made every step read
two or three sequences of the paper's 2,048 tokens, half of the rehearsal's training
time), and needs at least one a step (the stand-in tokenizers' tokens per word vary by
less than the margin)."""


def _training_words(config: Mapping[str, Any], dataset: str, texts: int, rows: int) -> int:
    """Words per text that the trainings on ``dataset`` need: their packed sequences
    (steps × batch_size / epochs, and the held-out ones) ``SAMPLE_MARGIN`` times over from
    a sample of ``texts`` texts, or ``WHOLE_SOURCE_MARGIN`` times over from all ``rows``
    rows of the stand-in for a training that reads the whole source (``corpus: source``,
    which reads every sequence, so that longer rows would lengthen it); ``PROBING_WORDS``
    when no training reads it."""
    needed = PROBING_WORDS
    for training in config["training"].values():
        if dataset in (training["dataset"], training.get("held_out")):
            sequences = training["steps"] * training["batch_size"] // (training.get("epochs") or 1)
            tokens = (sequences + training["held_out_sequences"] + 1) * (training["context"] + 1)
            whole = training.get("corpus") == "source"
            read, margin = (rows, WHOLE_SOURCE_MARGIN) if whole else (texts, SAMPLE_MARGIN)
            needed = max(needed, math.ceil(margin * tokens * WORDS_PER_TOKEN / read))
    return needed


def _documents(texts: Sequence[str], words: int) -> Iterator[str]:
    """``texts`` joined into documents of at least ``words`` words, endlessly."""
    number = 0
    while True:
        parts: list[str] = []
        count = 0  # words so far (recounting them all at each part made a long one quadratic)
        while not parts or count < words:
            parts.append(texts[number % len(texts)])
            count += len(parts[-1].split())
            number += 1
        yield " ".join(parts)


def _nested(row: dict[str, Any], dotted: str, value: Any) -> None:
    """Set ``row``'s field ``dotted`` (``meta.pile_set_name``: a struct's field)."""
    *parents, last = dotted.split(".")
    for parent in parents:
        row = row.setdefault(parent, {})
    row[last] = value


def dataset_rows(dataset: HubDataset, texts: Sequence[str], split: str) -> list[dict[str, Any]]:
    """The stand-in rows of one split, group after group, each row's text in every text
    field and its group's ``where`` values in theirs (``other`` in the fields that other
    groups filter on: every split has the same fields)."""
    where_fields = sorted({field for group in dataset.groups.values() for field, _ in group.where})
    rows = []
    for group in dataset.groups.values():
        if group.split != split:
            continue
        documents = _documents(texts, group.words)
        for _ in range(group.rows):
            text = next(documents)
            row: dict[str, Any] = {}
            for field in sorted(dataset.text_fields):
                _nested(row, field, text)
            values = dict(group.where)
            for field in where_fields:
                _nested(row, field, values.get(field, "other"))
            rows.append(row)
    return rows


def write_hub_dataset(cache: Path, dataset: HubDataset, texts: Sequence[str]) -> None:
    """``dataset`` as a prepared dataset in the datasets cache ``cache`` (the folder
    ``<namespace>___<name>/<config>/0.0.0/<hash>`` with its ``dataset_info.json`` and one
    Arrow file per split), where ``datasets.load_dataset`` finds it offline."""
    import datasets
    import pyarrow as pa
    from datasets.arrow_writer import ArrowWriter
    from datasets.naming import camelcase_to_snakecase

    parts = dataset.name.split("/")
    parts[-1] = camelcase_to_snakecase(parts[-1])
    config_name = dataset.config_name or "default"
    folder = cache / "___".join(parts) / config_name / "0.0.0" / ("0" * 16)
    folder.mkdir(parents=True)
    splits, features = [], None
    for split in sorted({group.split for group in dataset.groups.values()}):
        table = pa.Table.from_pylist(dataset_rows(dataset, texts, split))
        features = datasets.Features.from_arrow_schema(table.schema)
        with ArrowWriter(path=str(folder / f"{parts[-1]}-{split}.arrow"), features=features) as out:
            out.write_table(table)
            count, size = out.finalize()
        splits.append(
            datasets.SplitInfo(
                name=split, num_examples=count, num_bytes=size, dataset_name=parts[-1]
            )
        )
    datasets.DatasetInfo(
        features=features,
        config_name=config_name,
        dataset_name=parts[-1],
        splits=datasets.SplitDict.from_split_dict(splits, dataset_name=parts[-1]),
    ).write_to_directory(str(folder))


def standin_texts() -> list[str]:
    """The stand-ins' English: the offline Wikipedia summaries of two topics, in order."""
    summaries = wikipedia_summaries({"topics": ["History", "Physical sciences"]})
    return [text for text, _ in summaries]


def write_standins(config: Mapping[str, Any], home: Path) -> tuple[int, int]:
    """Stand-ins of every hub model and dataset of the (count-divided) ``config`` in the
    Hugging Face home ``home`` (``hub/`` and ``datasets/``); (models, datasets) written."""
    import transformers

    transformers.utils.logging.disable_progress_bar()
    texts = standin_texts()
    models_found, datasets_found = hub_models(config), hub_datasets(config)
    # Every stand-in spells each token of the token groups as one token, as the models the
    # groups were written for do (Qwen2.5's /a), so that their jobs run.
    groups = config["signatures"]["token_groups"].values()
    extra_tokens = sorted({token for group in groups for token in group["tokens"]})
    record = read_hub_files(config["hub_files"]) if config.get("hub_files") else None
    for model in models_found:
        write_hub_model(home / "hub", model, texts[:400], extra_tokens, record)
    for dataset in datasets_found:
        write_hub_dataset(home / "datasets", dataset, texts)
    return len(models_found), len(datasets_found)
