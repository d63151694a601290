"""Bad input, as a user would write it, stops the workflow before its first job with a
message that names the key or file and says what to do, and leaves nothing in results/.

Each case is a config file's text (YAML, so that what YAML itself makes of it is tested
too) made from a small valid config, and the phrase its message must hold. The workflow is
planned by a dry run in this process (Snakemake's API), as ``snakemake -n`` does.
"""

from __future__ import annotations

import copy
import json
import math
import shutil
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import pytest
import torch
import yaml
from safetensors import safe_open
from snakemake.exceptions import WorkflowError
from snakemake_runs import dry_run, snakemake, write_config

GPU_VISIBLE = torch.cuda.is_available()


@dataclass(frozen=True)
class Case:
    name: str
    text: Callable[[dict], str]
    """The config file's text, from the valid config."""
    phrase: str
    """What the message must hold (the key or file, and what to do)."""


def dump(config: dict) -> str:
    return yaml.safe_dump(config, sort_keys=False)


def changed(**blocks) -> Callable[[dict], str]:
    """The valid config with top-level ``blocks`` replaced or added."""
    return lambda config: dump(config | blocks)


def deeper(path: str, value) -> Callable[[dict], str]:
    """The valid config with the dotted key ``path`` set to ``value``."""

    def text(config: dict) -> str:
        config = yaml.safe_load(dump(config))
        *parents, last = path.split(".")
        block = config
        for key in parents:
            block = block.setdefault(key, {})
        block[last] = value
        return dump(config)

    return text


def appended(lines: str) -> Callable[[dict], str]:
    """The valid config's text with ``lines`` added at its end (YAML as written)."""
    return lambda config: dump(config) + lines


def replaced(old: str, new: str) -> Callable[[dict], str]:
    """The valid config's text with ``old`` written as ``new``."""

    def text(config: dict) -> str:
        written = dump(config)
        assert old in written, f"{old!r} is not in the config's text"
        return written.replace(old, new, 1)

    return text


CASES = [
    Case("unknown top-level key", changed(equilerning={"norms": ["model"]}),
         "equilerning: unknown key; did you mean 'equilearning'?"),
    Case("unknown nested key", deeper("equilearning.norm", ["model"]),
         "equilearning.norm: unknown key; did you mean 'norms'?"),
    Case("unknown key far from any", changed(zzz=1), "zzz: unknown key; known keys: coupling"),
    Case("value outside an enum", deeper("equilearning.norms", ["layer"]),
         "equilearning.norms[0]: 'layer' is not allowed: expected one of \"model\""),
    Case("a word for a number", deeper("models.tiny-llama.gpus", "two"),
         "models.tiny-llama.gpus: 'two' is not allowed: expected integer ≥ 1 or \"auto\""),
    Case("a number below its minimum", deeper("datasets.mini.max_tokens", 1),
         "datasets.mini.max_tokens: 1 is less than the minimum of 2"),
    Case("5e-3, text in YAML 1.1", appended("synthetic:\n  learning_rate: 5e-3\n"),
         "YAML 1.1 reads 5e-3 as text, not a number: write 5.0e-3"),
    Case("a key read as a boolean", replaced("  mini:\n", "  on:\n"),
         "config.yaml, line 12: the key on is read by YAML as True; quote it ('on')"),
    Case("a model key given twice",
         replaced("models:\n", "models:\n  tiny-llama:\n    source: {kind: hub, id: x/y}\n"),
         "the key 'tiny-llama' is given twice in one block (also on line 2)"),
    Case("a renamed key", deeper("coupling.k", 10), "coupling.k was renamed: use coupling.ks"),
    Case("a removed key", deeper("equilearning.chunk_rows", 10),
         "equilearning.chunk_rows was removed"),
    Case("a run of an unknown model", changed(runs=[{"model": "gpt5", "dataset": "mini"}]),
         "runs[0].model is 'gpt5', which is not a key of models"),
    Case("a run of an unknown dataset",
         changed(runs=[{"model": "tiny-llama", "dataset": "wiki"}]),
         "runs[0].dataset is 'wiki', which is not a key of datasets"),
    Case("a dataset left out that is none", deeper("datasets.mini.exclude", ["ghost"]),
         "datasets.mini.exclude[0] is 'ghost', which is not a key of datasets"),
    Case("a missing local model folder", deeper("models.tiny-llama.source.path", "/no/model"),
         "models.tiny-llama.source.path: /no/model does not exist; give the folder"),
    Case("a missing corpus file", deeper("datasets.mini.source.paths", ["/no/texts.txt"]),
         "datasets.mini.source.paths[0]: /no/texts.txt does not exist"),
    Case("a model package not installed",
         deeper("models.tiny-llama.source", {"kind": "gguf_package", "package": "no-such-model",
                                              "file": "m.gguf"}),
         "package 'no-such-model' is not installed; install it with"),
    Case("token-view layers beyond the model's depth",
         changed(equilearning={"token_views": {"layers": [4, 7]}}),
         "[7] are not layers of model tiny-llama, whose L is 4"),
    Case("a K beyond the model's hidden size",
         changed(coupling={"prompts": {"few": {"texts": ["a b"]}}, "ks": [10, 50],
                           "runs": [{"model": "tiny-llama", "prompts": "few"}]}),
         "coupling.ks holds K = 50, more singular vectors than the model's hidden size 24"),
    Case("an observer file that is not there",
         deeper("equilearning.observers", [{"name": "mine", "class": "plugins/mine.py:Mine"}]),
         "equilearning.observers[0].class: no file plugins/mine.py (a path is read from the "
         "working directory"),
    Case("an observer module not installed",
         deeper("equilearning.observers", [{"name": "mine", "class": "no_such_stats.mine:Mine"}]),
         "equilearning.observers[0].class: no module 'no_such_stats.mine' to import; install"),
    Case("an observer of an unknown model",
         deeper("equilearning.observers", [{"name": "geometry", "models": ["gpt5"]}]),
         "equilearning.observers[0].models: 'gpt5' is no key of models or training"),
    Case("a built-in observer's bad settings",
         changed(equilearning={"observers": ["geometry"],
                               "geometry": {"alpha_req_ranks": [100, 6]}}),
         "equilearning.geometry: geometry alpha_req_ranks is (100, 6); give two ranks"),
]  # fmt: skip


def size_of(folder: Path) -> dict:
    """The ``size`` block of a saved model: its config's shape and its weights' count."""
    config = json.loads((folder / "config.json").read_text())
    with safe_open(folder / "model.safetensors", framework="numpy") as weights:
        parameters = sum(math.prod(weights.get_slice(name).get_shape()) for name in weights.keys())  # noqa: SIM118
    return {
        "parameters": parameters,
        "num_layers": config["num_hidden_layers"],
        "hidden_size": config["hidden_size"],
        "vocab_size": config["vocab_size"],
    }


@pytest.fixture
def valid_config(llama_folder, corpus_file) -> dict:
    """A tiny Llama (its size given, as for planning offline) on a small corpus."""
    model = {"source": {"kind": "local", "path": str(llama_folder)}, "size": size_of(llama_folder)}
    return {
        "models": {"tiny-llama": model},
        "datasets": {
            "mini": {"source": {"kind": "files", "paths": [str(corpus_file)]}, "n_samples": 10}
        },
        "runs": [{"model": "tiny-llama", "dataset": "mini"}],
    }


def planned(workdir: Path, text: str) -> str:
    """The message of the dry run of the config file ``text`` (it must fail)."""
    workdir.mkdir()
    (workdir / "config.yaml").write_text(text)
    with pytest.raises(WorkflowError) as error:
        dry_run(workdir)
    return str(error.value)


def test_the_valid_config_plans(valid_config, tmp_path):
    (tmp_path / "config.yaml").write_text(dump(valid_config))
    assert "equilearning_pass" in dry_run(tmp_path)


@pytest.mark.parametrize("case", CASES, ids=[case.name for case in CASES])
def test_bad_input_is_named_before_the_first_job(case, valid_config, tmp_path):
    message = planned(tmp_path / "run", case.text(valid_config))
    assert case.phrase in message, message
    assert len(message.splitlines()) <= 8, f"the message is {len(message.splitlines())} lines"
    assert not (tmp_path / "run" / "results").exists()


@pytest.mark.slow
def test_bad_files_stop_their_own_jobs_with_a_line_each(base_config, tmp_path):
    """Problems found only by reading the files, each stopping its own job of one real run
    (--keep-going) with one line in its log and on the console, and no partial output: an
    empty corpus and one that is not UTF-8 (sampling), texts all too short and a max_tokens
    that leaves too few text tokens (tokenisation), truncated weights (the model's
    preparation). The one sound run completes, under ``device: cuda`` on the GPU where one
    is visible (where none is, ``device: cuda`` stops a run before its first job:
    tests/pipeline/test_preflight.py)."""
    (tmp_path / "empty.txt").write_text("\n \n")
    (tmp_path / "latin1.txt").write_bytes("Un texte\nen français, déjà\n".encode("latin-1"))
    broken = Path(shutil.copytree(base_config["models"]["tiny-llama"]["source"]["path"],
                                  tmp_path / "broken"))  # fmt: skip
    weights = broken / "model.safetensors"
    weights.write_bytes(weights.read_bytes()[:100])
    config = copy.deepcopy(base_config)
    mini = config["datasets"]["mini"]
    files = lambda name: {**mini, "source": {"kind": "files", "paths": [str(tmp_path / name)]}}  # noqa: E731
    config["datasets"] = {
        "empty": files("empty.txt"),
        "latin1": files("latin1.txt"),
        "short": {**mini, "min_tokens": 500},
        "cut": {**mini, "max_tokens": 2},
        "mini": mini,
    }
    config["models"]["broken"] = {"source": {"kind": "local", "path": str(broken)}}
    config["runs"] = [{"model": "tiny-llama", "dataset": name} for name in config["datasets"]]
    config["runs"].append({"model": "broken", "dataset": "mini"})
    config["signatures"]["runs"] = config["coupling"]["runs"] = []
    config["signatures"]["pools"] = {}
    config["execution"]["device"] = "cuda" if GPU_VISIBLE else "auto"
    write_config(tmp_path, config)
    result = snakemake(tmp_path, "--keep-going")
    assert result.returncode != 0
    logs = tmp_path / "results/logs"
    messages = {
        "sample_sentences/empty.log": "is empty: it holds no non-blank text",
        "sample_sentences/latin1.log": f"{tmp_path / 'latin1.txt'} is not valid UTF-8: byte 16",
        "tokenize/tiny-llama/short.log": "fewer than min_tokens=500 text tokens",
        "tokenize/tiny-llama/cut.log": "max_tokens=2 (special tokens counted) cut 40 of them",
        "prepare_model/broken.log": f"the weight file {weights} is corrupt or truncated",
    }
    for log, message in messages.items():
        text = (logs / log).read_text()
        assert message in text and "Traceback" not in text, text
        assert message in result.stdout + result.stderr
    results = tmp_path / "results"
    assert not (results / "corpus/empty").exists() and not (results / "corpus/latin1").exists()
    assert not (results / "tokens/tiny-llama/short.parquet").exists()
    assert not (results / "tokens/tiny-llama/cut.parquet").exists()
    assert not (results / "models/broken").exists()
    completed = [
        (results / "hidden/tiny-llama/mini").exists(),
        (results / "equilearning/tiny-llama/mini/pr.csv").exists(),
    ]
    assert completed == [True, True]
    if GPU_VISIBLE:
        assert "running on cuda:" in (logs / "equilearning_pass/tiny-llama/mini.log").read_text()
    assert not list(results.rglob(".*.tmp-*"))
