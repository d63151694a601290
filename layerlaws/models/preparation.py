"""Preparing a model once from its configured source.

A *prepared* model is a folder with ``layerlaws_model.json``: the model's facts and where
its weights and tokenizer lie. A local model, a model folder inside an installed package
and a hub model (from the Hugging Face cache) are used where they lie, never copied; a
GGUF file (one file, or one assembled from packaged parts) is dequantised once, and a
randomly initialised twin or a packaged model given a tokenizer of its own is saved, in
the folder itself (``save_pretrained`` layout, safetensors).
"""

from __future__ import annotations

import copy
import json
from collections.abc import Mapping
from dataclasses import asdict
from pathlib import Path
from typing import Any

import torch

from layerlaws.core.dtypes import torch_dtype
from layerlaws.core.errors import LayerlawsError
from layerlaws.core.packages import package_file, package_folder
from layerlaws.models.architectures import (
    architecture_of,
    auto_class,
)
from layerlaws.models.checkpoints import checkpoint_keys, lm_head_trained
from layerlaws.models.downloads import hub_snapshot, read_config, tokenizer_snapshot
from layerlaws.models.facts import MODEL_METADATA, ModelFacts, model_facts, weights_dtype
from layerlaws.models.hub_files import files_of_listing
from layerlaws.models.parts import assembled_file
from layerlaws.models.weight_files import readable_gguf, readable_safetensors

GGUF_KINDS = ("gguf_package", "gguf_file", "package_parts")
FOLDER_KINDS = ("local", "package_folder")
"""Source kinds whose weights are a GGUF file, and those that are a model folder here."""


def gguf_location(source: Mapping[str, Any]) -> Path:
    """The GGUF file of a ``gguf_package``, ``package_parts`` (assembled on first use) or
    ``gguf_file`` source."""
    if source["kind"] == "gguf_package":
        return package_file(source["package"], source["file"])
    if source["kind"] == "package_parts":
        return assembled_file(source)
    path = Path(source["path"])
    if not path.is_file():
        raise LayerlawsError(f"GGUF file {path} does not exist")
    return path


def _gguf_config(gguf: Path) -> Any:
    """The config inside a GGUF file, checked against the architecture table."""
    from transformers import AutoConfig

    with readable_gguf(gguf):
        config = AutoConfig.from_pretrained(str(gguf.parent), gguf_file=gguf.name)
    architecture_of(config)
    return config


def _from_gguf(gguf: Path) -> tuple[Any, Any, bool]:
    """Model (float32, CPU) and tokenizer from a GGUF file, its weights dequantised, and
    whether the file held the LM head."""
    from transformers import AutoModelForCausalLM, AutoTokenizer

    folder, name = str(gguf.parent), gguf.name
    config = _gguf_config(gguf)
    with readable_gguf(gguf):
        tokenizer = AutoTokenizer.from_pretrained(folder, gguf_file=name)
        quantised, loading = AutoModelForCausalLM.from_pretrained(
            folder, gguf_file=name, dtype=torch.float32, output_loading_info=True
        )
    stored = set(quantised.state_dict()) - set(loading["missing_keys"])
    # A model loaded from GGUF refuses save_pretrained: copy its dequantised weights into a
    # plain model built from the same config.
    model = AutoModelForCausalLM.from_config(config)
    model.load_state_dict(quantised.state_dict())
    return model, tokenizer, lm_head_trained(quantised, stored)


def _model_folder(source: Mapping[str, Any]) -> Path:
    """The folder of a ``local`` or ``package_folder`` source."""
    if source["kind"] == "package_folder":
        return package_folder(source["package"], source["folder"])
    folder = Path(source["path"]).resolve()
    if not folder.is_dir():
        raise LayerlawsError(f"local model folder {source['path']} does not exist")
    return folder


def _weights_folder(
    source: Mapping[str, Any], trust_remote_code: bool, commit: str | None
) -> tuple[Path, Any]:
    """(folder of the weights and tokenizer, config) of a hub (at ``commit`` when given),
    local or packaged folder."""
    if source["kind"] in FOLDER_KINDS:
        folder = _model_folder(source)
    elif source["kind"] == "hub":
        folder = hub_snapshot(source, trust_remote_code, commit)
    else:
        raise LayerlawsError(
            f"unknown model source kind {source['kind']!r}; use hub, local, package_folder, "
            f"gguf_package, package_parts or gguf_file"
        )
    return folder, read_config(str(folder), None, trust_remote_code)


def source_config(model_config: Mapping[str, Any]) -> Any:
    """The config of a configured model (``models.<key>``), read without its weights from
    its GGUF file, its folder (local or in a package) or the hub."""
    source, remote_code = model_config["source"], model_config.get("trust_remote_code", False)
    if source["kind"] in GGUF_KINDS:
        return _gguf_config(gguf_location(source))
    if source["kind"] in FOLDER_KINDS:
        return read_config(str(_model_folder(source)), None, remote_code)
    return read_config(source["id"], source.get("revision"), remote_code, source.get("subfolder"))


def skeleton_of(config: Any, trust_remote_code: bool) -> Any:
    """The model of ``config`` on the meta device: every module, no weights in memory."""
    with torch.device("meta"):
        return auto_class(config.model_type).from_config(
            config, trust_remote_code=trust_remote_code
        )


def _checked_tokenizer(folder: Path) -> Any:
    """The tokenizer in ``folder``, or a LayerlawsError saying it has none."""
    from transformers import AutoTokenizer

    # transformers 5 builds an empty tokenizer (no tokens) from a folder without one.
    if not files_of_listing(path.name for path in folder.iterdir()).tokenizer:
        raise LayerlawsError(
            f"the model in {folder} has no usable tokenizer: the folder holds no tokenizer "
            f"files; give the model's tokenizer source as models.<key>.tokenizer"
        )
    try:
        return AutoTokenizer.from_pretrained(str(folder))
    except Exception as error:
        raise LayerlawsError(f"the model in {folder} has no usable tokenizer: {error}") from error


def borrowed_tokenizer(
    tokenizer_source: Mapping[str, Any], download: Mapping[str, Any] | None = None
) -> Any:
    """The tokenizer a model's repository lacks, from its ``models.<key>.tokenizer``: a
    hub source (read at the commit its ``download`` recorded, when given) or a local or
    packaged folder; He & Su's released code gives the data-constrained GPT-2 models of
    Muennighoff et al. GPT-2's (feature_learning.load_model_from_path)."""
    if tokenizer_source["kind"] == "hub":
        commit = None if download is None else download["tokenizer"]["commit"]
        folder = tokenizer_snapshot(tokenizer_source, commit)[1]
    else:
        folder = _model_folder(tokenizer_source)
    return _checked_tokenizer(folder)


def _with_vocabulary(
    source: Mapping[str, Any], folder: Path, config: Any, trust_remote_code: bool
) -> tuple[Any, Any]:
    """Model (in its weights' dtype, CPU) and tokenizer of a packaged folder that has no
    tokenizer, only a BERT vocabulary (``tokenizer_vocabulary``): a ``BertTokenizer`` that
    keeps case (a protein model's residues are upper-case letters, each a token of its
    own; lower-cased, every one would be unknown)."""
    from transformers import BertTokenizer

    vocabulary = package_file(source["package"], source["tokenizer_vocabulary"])
    tokenizer = BertTokenizer(
        vocab=str(vocabulary),
        do_lower_case=False,
        model_max_length=config.max_position_embeddings,
    )
    with readable_safetensors(folder):
        model = auto_class(config.model_type).from_pretrained(
            str(folder),
            dtype=torch_dtype(weights_dtype(config)),
            trust_remote_code=trust_remote_code,
        )
    return model, tokenizer


def randomly_initialised(model: Any, init_seed: int) -> Any:
    """A model of ``model``'s architecture and config with fresh weights, seeded by
    ``init_seed``, on the CPU in float32: drawn the same whatever dtype ``model`` runs in
    (an initialisation in float64 or bfloat16 would draw other numbers)."""
    torch.manual_seed(init_seed)
    config = copy.deepcopy(model.config)  # from_config sets the config's dtype
    return auto_class(config.model_type).from_config(config, dtype=torch.float32)


def prepare_model(
    model_config: Mapping[str, Any],
    out_folder: str | Path,
    download: Mapping[str, Any] | None = None,
) -> ModelFacts:
    """Prepare a model from its configured source: write its facts into ``out_folder``
    (which must not exist; the caller renames it into place), and its weights only where
    they lie nowhere else. A hub model is fetched into the Hugging Face cache
    (``layerlaws.models.downloads.hub_snapshot``), or, given the record of its
    ``download`` (``downloads.download_model``), read there at the recorded commit without
    fetching anything.

    ``model_config`` holds ``source`` (see the config schema), ``init`` (``trained`` or
    ``random``: a randomly initialised twin of the same architecture, seeded by
    ``init_seed``) and ``trust_remote_code``. A local or packaged folder is used where it
    is and a hub model from the Hugging Face cache (its facts record the folder): none is
    copied, but a packaged folder given a ``tokenizer_vocabulary`` is saved with that
    tokenizer (in its weights' dtype). A GGUF is dequantised once and saved (float32); a
    random twin is saved in the dtype its config names. A model whose repository has no
    tokenizer takes the one of its ``tokenizer`` source (``borrowed_tokenizer``), saved in
    the prepared folder (``facts.tokenizer_folder``). The facts record whether the
    checkpoint held the LM head (``lm_head_trained``).
    """
    source, init = model_config["source"], model_config.get("init", "trained")
    borrowed = False
    remote_code = model_config.get("trust_remote_code", False)
    out = Path(out_folder)
    if source["kind"] in GGUF_KINDS:
        model, tokenizer, head_trained = _from_gguf(gguf_location(source))
        weights = None
    else:
        commit = None if download is None else download["commit"]
        folder, config = _weights_folder(source, remote_code, commit)
        model, weights = skeleton_of(config, remote_code), str(folder)
        head_trained = lm_head_trained(model, checkpoint_keys(folder))
        if source.get("tokenizer_vocabulary"):
            model, tokenizer = _with_vocabulary(source, folder, config, remote_code)
            weights = None
        elif model_config.get("tokenizer"):
            tokenizer, borrowed = borrowed_tokenizer(model_config["tokenizer"], download), True
        else:
            tokenizer = _checked_tokenizer(folder)
    if init == "random":
        stored = torch_dtype(weights_dtype(model.config))  # the source's weights' dtype
        model = randomly_initialised(model, int(model_config.get("init_seed", 0))).to(stored)
        model.config.dtype = stored
        weights = None
    facts = model_facts(model, {**source, "init": init}, weights, head_trained)
    out.mkdir(parents=True)
    if weights is None:
        model.save_pretrained(out)
    if weights is None or borrowed:
        tokenizer.save_pretrained(out)
    (out / MODEL_METADATA).write_text(json.dumps(asdict(facts), indent=2) + "\n")
    return facts
