"""Hub models fetched once where the network is, and read from the cache by the jobs.

The workflow's ``download_model`` jobs run on the machine Snakemake runs on (a local rule:
under a cluster executor, the submitting host), fetch a hub model's files into the Hugging
Face cache (``HF_HOME``, ``HF_HUB_CACHE``) and record its snapshot: the folder and the
commit. ``prepare_model`` then reads that commit from the cache and fetches nothing. A
cluster's compute nodes often have no internet, so the jobs Snakemake runs elsewhere read
the hub offline (``OFFLINE_VARIABLES`` set to 1 unless given), and a model missing from the
cache stops a job with one line that says what to do.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from layerlaws.core.errors import LayerlawsError
from layerlaws.models.hub_files import HubFiles, check_listing, described
from layerlaws.models.weight_files import check_config_json

TOKENIZER_FILES = ["*.json", "*.model", "*.txt", "*.tiktoken", "tokenizer*"]
"""What is fetched of a tokenizer's source (``models.<key>.tokenizer``): the tokenizer's
files and the config, which names its class where its own config does not (GPT-2's)."""
HUB_FILES = [*TOKENIZER_FILES, "*.safetensors"]
"""What is fetched of a hub model: config, safetensors weights, tokenizer files (weights
only as ``BIN_FILES`` when a repository has no safetensors)."""
BIN_FILES = ["*.bin"]
REMOTE_CODE_FILES = ["*.py"]
"""The model code of a ``trust_remote_code`` model, fetched with it."""
SKIPPED_FILES = ["consolidated*"]
"""Files never fetched: Mistral's own copy of the weights (``consolidated.safetensors``),
which transformers does not read."""
OFFLINE_VARIABLES = ("HF_HUB_OFFLINE", "HF_DATASETS_OFFLINE")
"""What makes Hugging Face's libraries read only their cache, in the cluster jobs."""


def _cache_miss(source: Mapping[str, Any], commit: str | None) -> LayerlawsError:
    """The one line of a hub model missing from the cache of a job that may not fetch it:
    one that reads the commit a download recorded, or one that runs offline."""
    from huggingface_hub import constants

    missing = f"{described(source)} is not in the Hugging Face cache {constants.HF_HUB_CACHE}"
    if commit is not None:
        return LayerlawsError(
            f"{missing} at commit {commit}, which its download job recorded: give the jobs the "
            f"HF_HOME the download used (on a cluster, on a file system the compute nodes "
            f"share), or download again (`snakemake download --forcerun download_model`)"
        )
    return LayerlawsError(
        f"{missing} and this job runs offline (HF_HUB_OFFLINE=1): run `snakemake download` "
        f"(with this run's --configfile) on a machine with the network first, with the "
        f"HF_HOME the jobs read"
    )


def _snapshot(source: Mapping[str, Any], patterns: list[str], commit: str | None) -> Path:
    """The snapshot (the repository's root folder in the cache) of a hub source, holding
    the files of ``patterns`` under its subfolder: fetched where this process may (no
    ``commit``, online), else found in the cache."""
    from huggingface_hub import constants, snapshot_download
    from huggingface_hub.errors import LocalEntryNotFoundError

    prefix = f"{source['subfolder'].strip('/')}/" if source.get("subfolder") else ""
    try:
        return Path(
            snapshot_download(
                source["id"],
                revision=commit or source.get("revision"),
                allow_patterns=[prefix + pattern for pattern in patterns],
                ignore_patterns=[prefix + pattern for pattern in SKIPPED_FILES],
                local_files_only=commit is not None,
            )
        )
    except Exception as error:
        offline = commit is not None or constants.HF_HUB_OFFLINE
        if offline and isinstance(error, LocalEntryNotFoundError):
            raise _cache_miss(source, commit) from error
        reason = (str(error).strip().splitlines() or [type(error).__name__])[0]
        raise LayerlawsError(
            f"could not fetch {described(source)}: {reason}. Check the id and revision, that "
            f"this machine can reach the hub and, for a gated model, that you accepted its "
            f"licence and ran `hf auth login` or set HF_TOKEN"
        ) from error


def read_config(
    where: str, revision: str | None, trust_remote_code: bool, subfolder: str | None = None
) -> Any:
    """The config of a hub id (or its ``subfolder``) or local folder, checked against the
    architecture table before any weights are fetched."""
    from transformers import AutoConfig

    from layerlaws.models.architectures import architecture_of  # torch: not in a dry run

    try:
        config = AutoConfig.from_pretrained(
            where,
            revision=revision,
            subfolder=subfolder or "",
            trust_remote_code=trust_remote_code,
        )
    except Exception as error:
        check_config_json(Path(where, subfolder or ""))
        inside = f", subfolder {subfolder!r}" if subfolder else ""
        raise LayerlawsError(
            f"could not load model {where!r} (revision {revision!r}{inside}): {error}. Check "
            f"the id or folder and (for the hub) that this machine can reach it"
        ) from error
    architecture_of(config)
    return config


def repository_files(source: Mapping[str, Any], root: Path) -> list[str]:
    """The files of a hub source's revision (its commit, the snapshot ``root``'s name),
    relative to the repository's root: the hub's listing, or offline (``HF_HUB_OFFLINE``)
    the files of the snapshot in the cache, which hold what a download fetched."""
    from huggingface_hub import HfApi, constants

    if constants.HF_HUB_OFFLINE:
        return sorted(str(p.relative_to(root)) for p in root.rglob("*") if p.is_file())
    return sorted(HfApi().list_repo_files(source["id"], revision=root.name))


def _snapshot_of_model(
    source: Mapping[str, Any],
    trust_remote_code: bool,
    commit: str | None,
    recorded: Mapping[str, Any] | None = None,
) -> tuple[Path, Path]:
    """(snapshot, model folder) of ``hub_snapshot``: its config first, checked against
    the architecture table where the weights are then fetched (not in the cache alone:
    the preparation checks it) and against the ``recorded`` files (``download_model``)
    before any weights are fetched, then the rest."""
    from huggingface_hub import constants

    code = REMOTE_CODE_FILES if trust_remote_code else []
    root = _snapshot(source, ["config.json", *code], commit)
    folder = root / (source.get("subfolder") or "")
    if recorded:
        files = HubFiles(**recorded["files"])
        listing = repository_files(source, root)
        check_listing(recorded["path"], source, files, listing, trust_remote_code)
    if not (folder / "config.json").is_file():
        raise LayerlawsError(
            f"{described(source)} has no config.json in its snapshot {folder}: check the "
            f"source's id and subfolder"
        )
    if commit is None and not constants.HF_HUB_OFFLINE:
        read_config(str(folder), None, trust_remote_code)
    root = _snapshot(source, HUB_FILES + code, commit)
    if not any(folder.glob("*.safetensors")):
        root = _snapshot(source, HUB_FILES + code + BIN_FILES, commit)
    return root, folder


def hub_snapshot(
    source: Mapping[str, Any], trust_remote_code: bool = False, commit: str | None = None
) -> Path:
    """The folder of a hub model in the Hugging Face cache (its ``subfolder`` for
    repositories that hold several models, e.g. the data-constrained GPT-2 models of
    Muennighoff et al.) with its config, tokenizer and weights of one format: safetensors
    where the repository has them, else ``.bin``.

    Without ``commit`` the files are downloaded where the hub is reachable (only the cache
    is read where this process runs offline); with the ``commit`` a download recorded they
    are read from the cache and nothing is fetched. A model missing from a cache that may
    not be filled is a LayerlawsError of one line saying what to do."""
    return _snapshot_of_model(source, trust_remote_code, commit)[1]


def tokenizer_snapshot(source: Mapping[str, Any], commit: str | None = None) -> tuple[Path, Path]:
    """(snapshot, folder) of a tokenizer's hub ``source`` (``models.<key>.tokenizer``) in
    the Hugging Face cache, with its tokenizer files and config (``TOKENIZER_FILES``):
    fetched where this process may, or read at the ``commit`` a download recorded."""
    root = _snapshot(source, TOKENIZER_FILES, commit)
    return root, root / (source.get("subfolder") or "")


def _record(source: Mapping[str, Any], root: Path, folder: Path) -> dict[str, Any]:
    """The download record of a hub source fetched into the snapshot ``root``."""
    return {
        "id": source["id"],
        "revision": source.get("revision") or "main",
        "subfolder": (source.get("subfolder") or "").strip("/"),
        "commit": root.name,
        "snapshot": str(folder),
    }


def download_model(model_config: Mapping[str, Any]) -> dict[str, Any]:
    """Fetch a configured hub model (``models.<key>``: its ``source``,
    ``trust_remote_code`` and ``tokenizer``) into the Hugging Face cache (``hub_snapshot``)
    and return the record of its download: ``id``, ``revision`` (as configured; ``main``
    by default), ``subfolder``, ``commit`` (the revision's commit hash), ``snapshot`` (the
    model's folder in the cache), ``files`` (the files there, relative to it) and, for a
    tokenizer from another hub source, ``tokenizer`` (that source's record).

    Given ``hub_files`` (the record of the repository's files: ``path`` of the data file,
    ``files`` the ``HubFiles`` fields), the hub's listing of the revision's files is
    checked against it once the config is fetched, before the weights
    (``hub_files.check_listing``): a LayerlawsError of one line where they differ in what
    the pipeline reads."""
    source, recorded = model_config["source"], model_config.get("hub_files")
    remote_code = model_config.get("trust_remote_code", False)
    root, folder = _snapshot_of_model(source, remote_code, None, recorded)
    record = _record(source, root, folder)
    record["files"] = sorted(
        str(path.relative_to(folder)) for path in folder.rglob("*") if path.is_file()
    )
    tokenizer = model_config.get("tokenizer")
    if tokenizer and tokenizer["kind"] == "hub":
        record["tokenizer"] = _record(tokenizer, *tokenizer_snapshot(tokenizer))
    return record


def read_record(path: str | Path) -> dict[str, Any]:
    """The record of a model's download (``download_model``) written to ``path``."""
    return json.loads(Path(path).read_text())
