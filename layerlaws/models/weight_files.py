"""Weight files that cannot be read: a safetensors file cut short by an interrupted download
or copy, a GGUF file that is corrupt or no GGUF at all, a ``config.json`` that is not JSON.

The libraries report them as errors that name no file (safetensors: ``incomplete metadata,
file not fully covered``) or only deep in a traceback. The context managers here turn the
error raised in their block into a LayerlawsError naming the damaged file, the cause and
what to do (``check_config_json`` does so for a config); a failure that no damaged file
explains is raised as it was.
"""

from __future__ import annotations

import contextlib
import json
from collections.abc import Iterator
from pathlib import Path

from layerlaws.core.errors import LayerlawsError


def _in_hub_cache(path: Path) -> bool:
    """Whether ``path`` lies in the Hugging Face hub cache (a hub model's snapshot)."""
    from huggingface_hub.constants import HF_HUB_CACHE

    return path.resolve().is_relative_to(Path(HF_HUB_CACHE).resolve())


def damaged_file(path: Path, cause: object) -> LayerlawsError:
    """The error for the weight file ``path`` that cannot be read (``cause``: why)."""
    if _in_hub_cache(path):
        blob = f" and the file it links to, {path.resolve()}," if path.is_symlink() else ""
        remedy = (
            f"delete it{blob} from the Hugging Face cache so that the next run fetches it again"
        )
    else:
        remedy = "re-download it (or save the model again)"
    return LayerlawsError(f"the weight file {path} is corrupt or truncated ({cause}): {remedy}")


def safetensors_damage(path: Path) -> str | None:
    """Why the safetensors file ``path`` cannot be read (its header, and whether its data
    cover the file as the header says), or None if it can."""
    from safetensors import SafetensorError, safe_open

    try:
        with safe_open(str(path), framework="pt"):
            return None
    except SafetensorError as error:
        return str(error)


@contextlib.contextmanager
def readable_safetensors(folder: Path) -> Iterator[None]:
    """Run the block, which reads the safetensors weights in ``folder``; a safetensors error
    there is raised as a LayerlawsError naming the first damaged file of ``folder``."""
    from safetensors import SafetensorError

    try:
        yield
    except SafetensorError as error:
        for path in sorted(Path(folder).glob("*.safetensors")):
            damage = safetensors_damage(path)
            if damage is not None:
                raise damaged_file(path, damage) from error
        raise


def gguf_damage(path: Path) -> str | None:
    """Why the GGUF file ``path`` cannot be read (its magic, header, tensor table and the
    extent of its tensors, as the ``gguf`` package reads them), or None if it can."""
    from gguf import GGUFReader

    try:
        GGUFReader(path)
    except Exception as error:  # whatever the reader trips on is damage
        return f"{type(error).__name__}: {error}"
    return None


@contextlib.contextmanager
def readable_gguf(path: Path) -> Iterator[None]:
    """Run the block, which reads the GGUF file ``path``; a failure there that a damaged
    file explains (``gguf_damage``) is raised as a LayerlawsError naming it."""
    try:
        yield
    except LayerlawsError:
        raise
    except Exception as error:
        damage = gguf_damage(path)
        if damage is None:
            raise
        raise damaged_file(path, damage) from error


def check_config_json(folder: Path) -> None:
    """Raise a LayerlawsError if the ``config.json`` of the model folder ``folder`` exists
    but is not valid JSON (or not UTF-8): the path, where it breaks and what to do."""
    path = Path(folder) / "config.json"
    if not path.is_file():
        return
    try:
        json.loads(path.read_bytes())
    except json.JSONDecodeError as error:
        where = f"{error.msg} at line {error.lineno}, column {error.colno}"
    except UnicodeDecodeError as error:
        where = f"byte {error.start} is not UTF-8"
    else:
        return
    raise LayerlawsError(
        f"the model config {path} is not valid JSON ({where}): fix it, or restore the "
        f"model's own config.json (re-download it)"
    )
