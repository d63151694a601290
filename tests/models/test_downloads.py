"""Hub models fetched once where the network is (``layerlaws.models.downloads``): which
files a download fetches (config, tokenizer, the weights of one format), its record, the
preparation reading the recorded commit from the cache, and a model missing from a cache
that may not be filled as one line that says what to do."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
from fake_hub import cached_snapshot
from huggingface_hub import constants
from huggingface_hub.utils import filter_repo_objects

from layerlaws.core.errors import LayerlawsError
from layerlaws.models.downloads import download_model
from layerlaws.models.loading import load_tokenizer
from layerlaws.models.preparation import prepare_model

MODEL_ID = "layerlaws-test/tiny-llama"
COMMIT = "0123456789abcdef0123456789abcdef01234567"
OTHER_COMMIT = "fedcba9876543210fedcba9876543210fedcba98"


def llama_files(llama_folder: Path) -> list[str]:
    return sorted(path.name for path in llama_folder.iterdir())


@pytest.fixture
def online_hub(tmp_path, monkeypatch):
    """A hub reached through ``snapshot_download`` (the tests' HF_HUB_OFFLINE lifted):
    ``repository`` (relative path → file) is the repository; a call copies the files its
    patterns select (huggingface_hub's own ``filter_repo_objects``) into a snapshot folder,
    as the real one does, and records its patterns."""
    repository: dict[str, Path] = {}
    calls: list[dict] = []
    snapshot = tmp_path / "snapshots" / COMMIT

    def snapshot_download(repo_id, revision, allow_patterns, ignore_patterns, local_files_only):
        assert (repo_id, revision, local_files_only) == (MODEL_ID, None, False)
        calls.append({"allow": allow_patterns, "ignore": ignore_patterns})
        for name in filter_repo_objects(
            repository, allow_patterns=allow_patterns, ignore_patterns=ignore_patterns
        ):
            (snapshot / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(repository[name], snapshot / name)
        return str(snapshot)

    monkeypatch.setattr("huggingface_hub.snapshot_download", snapshot_download)
    monkeypatch.setattr(constants, "HF_HUB_OFFLINE", False)
    return repository, calls, snapshot


def fill(repository: dict[str, Path], folder: Path, prefix: str = "") -> None:
    for path in folder.iterdir():
        repository[prefix + path.name] = path


def test_a_repository_with_safetensors_gives_those_and_no_other_weights(
    online_hub, llama_folder, tmp_path
):
    """Config and tokenizer first, then the safetensors; never the ``.bin`` copy, Mistral's
    ``consolidated.safetensors`` nor model code the config does not trust."""
    repository, calls, snapshot = online_hub
    fill(repository, llama_folder)
    for name in ("pytorch_model.bin", "consolidated.safetensors", "modeling_llama.py"):
        (tmp_path / name).write_bytes(b"not read")
        repository[name] = tmp_path / name
    record = download_model({"source": {"kind": "hub", "id": MODEL_ID}})
    assert record == {
        "id": MODEL_ID,
        "revision": "main",
        "subfolder": "",
        "commit": COMMIT,
        "snapshot": str(snapshot),
        "files": llama_files(llama_folder),
    }
    assert [call["allow"][0] for call in calls] == ["config.json", "*.json"]
    assert "model.safetensors" in record["files"]


def test_an_unknown_architecture_is_refused_before_the_weights(online_hub, tmp_path):
    repository, calls, snapshot = online_hub
    (tmp_path / "config.json").write_text('{"model_type": "vit"}')
    (tmp_path / "model.safetensors").write_bytes(b"weights")
    repository.update({name: tmp_path / name for name in ("config.json", "model.safetensors")})
    with pytest.raises(LayerlawsError, match="model type 'vit' is not in the architecture"):
        download_model({"source": {"kind": "hub", "id": MODEL_ID}})
    assert [call["allow"] for call in calls] == [["config.json"]]
    assert [path.name for path in snapshot.iterdir()] == ["config.json"]


def test_bin_weights_where_a_repository_has_no_safetensors(online_hub, llama_folder, tmp_path):
    repository, calls, _ = online_hub
    fill(repository, llama_folder)
    del repository["model.safetensors"]
    (tmp_path / "pytorch_model.bin").write_bytes(b"weights")
    repository["pytorch_model.bin"] = tmp_path / "pytorch_model.bin"
    record = download_model({"source": {"kind": "hub", "id": MODEL_ID}})
    expected = {*llama_files(llama_folder), "pytorch_model.bin"} - {"model.safetensors"}
    assert record["files"] == sorted(expected)
    assert len(calls) == 3 and "*.bin" in calls[-1]["allow"]


def test_a_subfolder_and_remote_code(online_hub, llama_folder, tmp_path):
    """A repository of several models gives the files of the configured subfolder alone;
    a ``trust_remote_code`` model its code too."""
    repository, _, snapshot = online_hub
    fill(repository, llama_folder, "small/transformers/")
    fill(repository, llama_folder, "large/transformers/")
    (tmp_path / "modeling.py").write_text("")
    repository["small/transformers/modeling.py"] = tmp_path / "modeling.py"
    source = {"kind": "hub", "id": MODEL_ID, "subfolder": "small/transformers"}
    record = download_model({"source": source, "trust_remote_code": True})
    assert record["snapshot"] == str(snapshot / "small" / "transformers")
    assert (record["subfolder"], record["commit"]) == ("small/transformers", COMMIT)
    assert record["files"] == sorted([*llama_files(llama_folder), "modeling.py"])
    assert not (snapshot / "large").exists()


def test_a_download_offline_reads_the_cache_and_the_preparation_its_commit(llama_folder, tmp_path):
    """Offline (HF_HUB_OFFLINE is set for the tests) the download resolves the revision in
    a filled cache; the preparation given its record reads the recorded commit, even once
    the branch has moved to a commit the cache does not hold."""
    source = {"kind": "hub", "id": MODEL_ID}
    with cached_snapshot(llama_folder, MODEL_ID, COMMIT) as snapshot:
        record = download_model({"source": source})
        assert (record["commit"], record["snapshot"]) == (COMMIT, str(snapshot))
        assert record["files"] == llama_files(llama_folder)
        (snapshot.parents[1] / "refs" / "main").write_text(OTHER_COMMIT)
        facts = prepare_model({"source": source}, tmp_path / "m", record)
        assert Path(facts.weights) == snapshot
        assert load_tokenizer(tmp_path / "m")("the set")["input_ids"]
        with pytest.raises(LayerlawsError, match="not in the Hugging Face cache"):
            prepare_model({"source": source}, tmp_path / "n")  # the branch's commit


def test_a_model_missing_from_the_cache_is_one_line(llama_folder, tmp_path):
    """Offline, the download of a model the cache lacks says so, and what to do; a
    preparation whose recorded commit has gone from the cache says how to get it back."""
    with pytest.raises(LayerlawsError) as offline:
        download_model({"source": {"kind": "hub", "id": "layerlaws-test/absent"}})
    assert str(offline.value) == (
        f"model 'layerlaws-test/absent' (revision main) is not in the Hugging Face cache "
        f"{constants.HF_HUB_CACHE} and this job runs offline (HF_HUB_OFFLINE=1): run "
        f"`snakemake download` (with this run's --configfile) on a machine with the network "
        f"first, with the HF_HOME the jobs read"
    )
    source = {"kind": "hub", "id": MODEL_ID, "revision": "step8"}
    with pytest.raises(LayerlawsError) as gone:
        prepare_model({"source": source}, tmp_path / "m", {"commit": OTHER_COMMIT})
    assert str(gone.value) == (
        f"model {MODEL_ID!r} (revision step8) is not in the Hugging Face cache "
        f"{constants.HF_HUB_CACHE} at commit {OTHER_COMMIT}, which its download job recorded: "
        f"give the jobs the HF_HOME the download used (on a cluster, on a file system the "
        f"compute nodes share), or download again "
        f"(`snakemake download --forcerun download_model`)"
    )
    assert not (tmp_path / "m").exists()
