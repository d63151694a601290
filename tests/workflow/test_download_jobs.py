"""Compute nodes without internet: ``snakemake download`` fetches the hub models and
samples the hub datasets where the network is, and the jobs then read the Hugging Face
cache offline (docs/gpus-and-clusters.md, "Compute nodes without internet"). Run offline
against a fake cache (HF_HUB_OFFLINE is set for the tests): the download and the
preparation reading its commit; a model and a dataset the cache lacks, each one line."""

from __future__ import annotations

import copy
import json
import os
import re
import shutil
from pathlib import Path

import yaml
from fake_hub import cached_snapshot
from huggingface_hub import constants
from snakemake_runs import REPO, run_ok, snakemake, write_config

from layerlaws.models.hub_files import files_of_listing

MODEL_ID = "layerlaws-test/hub-llama"
COMMIT = "00112233445566778899aabbccddeeff00112233"


def hub_config(base_config: dict, dataset_source: dict) -> dict:
    """The tiny workflow's dataset (from ``dataset_source``) measured by one hub model."""
    config = copy.deepcopy(base_config)
    config["models"] = {"hub-llama": {"source": {"kind": "hub", "id": MODEL_ID}}}
    config["datasets"]["mini"]["source"] = dataset_source
    config["runs"] = [{"model": "hub-llama", "dataset": "mini"}]
    config["signatures"] = {"runs": []}
    config["coupling"]["runs"] = []
    return config


def error_lines(log: Path) -> list[str]:
    """The messages of a job log's ERROR records; a log with a traceback fails."""
    text = log.read_text()
    assert "Traceback" not in text, text
    return [line.split(": ", 1)[1] for line in text.splitlines() if " ERROR " in line]


def test_the_download_then_the_preparation_offline(base_config, llama_folder, tmp_path):
    """The model's download job records its snapshot and commit, and its preparation
    (the next job) reads that commit from the cache (the branch moved on:
    tests/models/test_downloads.py); a download run again reruns nothing."""
    config = hub_config(base_config, base_config["datasets"]["mini"]["source"])
    write_config(tmp_path, config)
    with cached_snapshot(llama_folder, MODEL_ID, COMMIT) as snapshot:
        run_ok(tmp_path, "results/models/hub-llama")
    record = json.loads((tmp_path / "results/downloads/hub-llama.json").read_text())
    assert (record["id"], record["revision"]) == (MODEL_ID, "main")
    assert (record["commit"], record["snapshot"]) == (COMMIT, str(snapshot))
    facts = json.loads((tmp_path / "results/models/hub-llama/layerlaws_model.json").read_text())
    assert facts["weights"] == str(snapshot)
    (tmp_path / "results/downloads/hub-llama.json").touch()  # a download run again
    again = snakemake(tmp_path, "results/models/hub-llama", "--dry-run")
    assert "Nothing to be done" in again.stdout + again.stderr


def test_what_the_cache_lacks_stops_its_job_in_one_line(base_config, tmp_path):
    """Offline, with neither the model nor the dataset in the cache: each job fails with
    the line that names it and says what to do, no traceback."""
    source = {"kind": "hub", "name": "layerlaws-test/absent-corpus", "split": "test"}
    write_config(tmp_path, hub_config(base_config, source))
    result = snakemake(tmp_path, "download", "--keep-going")
    assert result.returncode != 0
    model_line = (
        f"model {MODEL_ID!r} (revision main) is not in the Hugging Face cache "
        f"{constants.HF_HUB_CACHE} and this job runs offline (HF_HUB_OFFLINE=1): run "
        f"`snakemake download` (with this run's --configfile) on a machine with the network "
        f"first, with the HF_HOME the jobs read"
    )
    assert error_lines(tmp_path / "results/logs/download_model/hub-llama.log") == [model_line]
    (dataset_line,) = error_lines(tmp_path / "results/logs/sample_sentences/mini.log")
    assert dataset_line.startswith(
        "dataset 'layerlaws-test/absent-corpus' (config None, split 'test') is not in the "
        f"Hugging Face datasets cache {Path(constants.HF_HUB_CACHE).parent / 'datasets'} and "
        "this job runs offline (HF_HUB_OFFLINE=1): run `snakemake download`"
    )
    assert model_line in result.stderr
    assert not (tmp_path / "results/downloads").exists()


def test_the_paper_config_downloads_every_hub_model_and_dataset(tmp_path):
    """``snakemake download`` on the paper config fetches its 156 hub models (every
    revision a model of its own; its plan downloads each before its preparation:
    test_workflow.py), samples the 20 hub datasets its jobs read, tokenises the five Pile
    subsets counted for Qwen2.5-3B's signatures and packs each for the two trainings on its
    whole source (Qwen2.5's and Llama 2's tokenizers: their models), and nothing else."""
    paper = REPO / "configs" / "paper.yaml"
    models = yaml.safe_load(paper.read_text())["models"].values()
    assert all(model["source"]["kind"] == "hub" for model in models)
    assert sum(len(model.get("revisions", [None])) for model in models) == 156
    listed = snakemake(tmp_path, "download", "--dry-run", "--quiet", "rules", configfile=paper)
    assert listed.returncode == 0, listed.stderr[-3000:]
    table = listed.stdout.split("Job stats:", 1)[1]
    assert dict(re.findall(r"^(\w+)\s+(\d+)\s*$", table, re.M)) == {
        "download_model": "156",
        "sample_sentences": "20",
        "prepare_model": "3",
        "pack_training_corpus": "10",
        "tokenize_corpus": "5",
        "download": "1",
        "total": "195",
    }
    assert not (tmp_path / "results").exists()


def test_a_cluster_job_reads_the_hub_offline_unless_told(base_config, tmp_path):
    """A job Snakemake runs elsewhere (``--mode remote``, as a cluster job's Snakemake
    runs) reads the hub offline where nothing says otherwise, and online under an exported
    HF_HUB_OFFLINE=0 (here a hub at an address that refuses, so it cannot fetch)."""
    write_config(tmp_path, hub_config(base_config, base_config["datasets"]["mini"]["source"]))
    environment = {
        name: value for name, value in os.environ.items() if not name.endswith("_OFFLINE")
    }
    environment["HF_ENDPOINT"] = "http://127.0.0.1:9"
    job = ("--mode", "remote", "--target-jobs", "download_model:model=hub-llama")
    errors = []
    for offline in ({}, {"HF_HUB_OFFLINE": "0"}):
        assert snakemake(tmp_path, *job, env=environment | offline).returncode != 0
        errors += error_lines(tmp_path / "results/logs/download_model/hub-llama.log")
    assert len(errors) == 2
    assert errors[0].startswith(f"model {MODEL_ID!r} (revision main) is not in the Hugging Face")
    assert "this job runs offline (HF_HUB_OFFLINE=1)" in errors[0]
    assert errors[1].startswith(f"could not fetch model {MODEL_ID!r} (revision main): ")


def recorded(tmp_path: Path, config: dict, tokenizer: bool) -> None:
    """``config`` (the hub model's) with ``hub_files``: a record beside it giving the
    model's repository one safetensors file and a tokenizer or none."""
    entry = {"ids": [MODEL_ID], "tokenizer": tokenizer, "safetensors": "single", "bin": "none"}
    (tmp_path / "hub_files.yaml").write_text(
        yaml.safe_dump({"repositories": [{**entry, "basis": "the test's snapshot"}]})
    )
    write_config(tmp_path, {**config, "hub_files": str(tmp_path / "hub_files.yaml")})


def test_a_listing_that_differs_from_the_record_stops_the_download_in_one_line(
    base_config, llama_folder, gpt2_folder, tmp_path
):
    """The record says the repository holds no tokenizer (the model names another), the
    hub's snapshot holds one: the download stops with the line naming the record."""
    config = hub_config(base_config, base_config["datasets"]["mini"]["source"])
    config["models"]["hub-llama"]["tokenizer"] = {"kind": "local", "path": str(gpt2_folder)}
    recorded(tmp_path, config, tokenizer=False)
    with cached_snapshot(llama_folder, MODEL_ID, COMMIT):
        result = snakemake(tmp_path, "download")
    assert result.returncode != 0
    record = tmp_path / "hub_files.yaml"
    assert error_lines(tmp_path / "results/logs/download_model/hub-llama.log") == [
        f"hub model {MODEL_ID!r} (revision main) differs from its record in {record} "
        f"(tokenizer: recorded False, the hub lists True): update the entry in {record} from "
        f"the hub's listing (and models.<key>.tokenizer where the tokenizer changed), then "
        f"download again"
    ]


def test_a_repository_without_a_tokenizer_borrows_one_through_download_and_preparation(
    base_config, llama_folder, tmp_path
):
    """A repository recorded (and stood in) without a tokenizer: a model naming none stops
    before the first job, with the key to set; named as another hub repository, the
    download fetches both, the preparation saves that tokenizer beside the model's facts
    (its weights read where they lie) and the model's pass reads it."""
    bare = tmp_path / "bare"
    bare.mkdir()
    for path in llama_folder.iterdir():
        if not files_of_listing([path.name]).tokenizer:
            shutil.copy2(path, bare / path.name)
    config = hub_config(base_config, base_config["datasets"]["mini"]["source"])
    recorded(tmp_path, config, tokenizer=False)
    stopped = snakemake(tmp_path, "download", "--dry-run")
    assert stopped.returncode != 0
    assert "holds no tokenizer" in stopped.stdout + stopped.stderr
    assert "set models.hub-llama.tokenizer to the source" in stopped.stdout + stopped.stderr
    tokenizer_id = "layerlaws-test/hub-llama-tokenizer"
    config["models"]["hub-llama"]["tokenizer"] = {"kind": "hub", "id": tokenizer_id}
    recorded(tmp_path, config, tokenizer=False)
    tokenizer_commit = "ffeeddccbbaa99887766554433221100ffeeddcc"
    with (
        cached_snapshot(bare, MODEL_ID, COMMIT) as snapshot,
        cached_snapshot(llama_folder, tokenizer_id, tokenizer_commit),
    ):
        run_ok(tmp_path, "results/equilearning/hub-llama/mini/pr.csv")
    record = json.loads((tmp_path / "results/downloads/hub-llama.json").read_text())
    assert record["tokenizer"]["commit"] == tokenizer_commit
    prepared = tmp_path / "results/models/hub-llama"
    facts = json.loads((prepared / "layerlaws_model.json").read_text())
    assert facts["weights"] == str(snapshot)
    assert files_of_listing(path.name for path in prepared.iterdir()).tokenizer
