"""A coupling job stopped after a progress save resumes per prompt and ends with the
outputs of an uninterrupted run, bit for bit on the CPU: through ``measure_prompts``
(a raised exception after a save standing in for a kill) and through a real Snakemake run
of ``measure_coupling`` killed with SIGKILL (``tests/fault_injection``). Saves of other
inputs or of other prompts are discarded. The Snakemake runs keep the arrays of the first
two of their three prompts (``coupling.keep_arrays: 2``): their prompts' files hold no
others', and shards and resumed jobs write the same outputs."""

from __future__ import annotations

import dataclasses
import logging
import shutil

import numpy as np
import polars as pl
import pytest
from coupling_runs import measure_prompts, measured_files, written
from fault_injection import killed_saves, killing_environment
from snakemake_runs import run_ok, snakemake, write_config

import layerlaws.coupling.prompt_set as prompt_set
from layerlaws.core.errors import LayerlawsError
from layerlaws.core.progress import ProgressSaves
from layerlaws.core.shards import shard_indices
from layerlaws.coupling.job import ShardArchives, write_shard
from layerlaws.coupling.measurement import TokenCoupling
from layerlaws.coupling.settings import CouplingSettings
from layerlaws.coupling.workflow import MEASURED
from layerlaws.models.loading import coupling_twins

PROMPTS = [[1, 5, 9, 14, 3], [1, 22, 8, 30], [1, 4, 12, 6, 19]]
SETTINGS = CouplingSettings(ks=(2, 3), token_layers=((2, 4),), svd="randomized", svd_seed=3)
UNITS = 2 * len(PROMPTS)
"""Prompts measured by a run: every prompt under the trained weights and the twin's."""
TABLES = ("depth", "singular_values", "tokens", "token_means", "trajectories", "layers")
ARRAYS = ("factors", "streams", "couplings")


class Killed(Exception):
    """Stands in for a kill right after a progress save."""


def measured(folder, saves=None, settings=SETTINGS, prompts=PROMPTS):
    """The tables of the tiny Llama in ``folder`` and its random twin, loaded
    afresh as a new job would."""
    return measure_prompts(folder, prompts, settings, saves=saves)[1]


def killed_run(monkeypatch, saves, after, **kwargs):
    """A run with ``saves`` stopped right after its ``after``-th save."""
    real_save = ProgressSaves.save

    def save_then_stop(self, state, progress):
        real_save(self, state, progress)
        if self.n_saves == after:
            raise Killed

    with monkeypatch.context() as patched:
        patched.setattr(ProgressSaves, "save", save_then_stop)
        with pytest.raises(Killed):
            measured(saves=saves, **kwargs)


def counted_prompts(monkeypatch) -> list[list[int]]:
    """The token ids of every prompt ``measure_prompt`` measures from now on."""
    calls, real_measure = [], prompt_set.measure_prompt

    def measure_prompt(model, input_ids, **kwargs):
        calls.append(input_ids[0].tolist())
        return real_measure(model, input_ids, **kwargs)

    monkeypatch.setattr(prompt_set, "measure_prompt", measure_prompt)
    return calls


def assert_same(result, expected):
    for name in TABLES:
        assert getattr(result, name).equals(getattr(expected, name)), name
    for name in ARRAYS:
        arrays, expected_arrays = getattr(result, name), getattr(expected, name)
        assert list(arrays) == list(expected_arrays), name
        for key, array in expected_arrays.items():
            assert np.array_equal(arrays[key], array), f"{name} {key}"


@pytest.fixture(scope="module")
def uninterrupted(llama_folder):
    return measured(llama_folder)


@pytest.mark.parametrize("after", [1, 4], ids=["first-prompt", "into-the-twin"])
def test_a_stopped_prompt_set_resumes_to_the_uninterrupted_results(
    llama_folder, uninterrupted, monkeypatch, caplog, tmp_path, after
):
    path = tmp_path / ".resume" / "depth.csv.pt"
    killed_run(monkeypatch, ProgressSaves(path, "inputs", 0), after, folder=llama_folder)
    computed = counted_prompts(monkeypatch)
    with caplog.at_level(logging.INFO, logger="layerlaws"):
        result = measured(llama_folder, ProgressSaves(path, "inputs", 0))
    assert f"resuming the coupling after {after} of {UNITS} prompts" in caplog.text
    assert computed == (PROMPTS * 2)[after:]
    assert_same(result, uninterrupted)


def test_a_save_of_other_inputs_is_discarded(
    llama_folder, uninterrupted, monkeypatch, caplog, tmp_path
):
    path = tmp_path / ".resume" / "depth.csv.pt"
    # Another lss_window changes every prompt's layers table: resumed, it would show.
    other = dataclasses.replace(SETTINGS, lss_window=3)
    killed_run(monkeypatch, ProgressSaves(path, "other", 0), 1, folder=llama_folder, settings=other)
    computed = counted_prompts(monkeypatch)
    with caplog.at_level(logging.INFO, logger="layerlaws"):
        result = measured(llama_folder, ProgressSaves(path, "inputs", 0))
    assert "it was made from other inputs" in caplog.text and "resuming" not in caplog.text
    assert computed == PROMPTS * 2
    assert_same(result, uninterrupted)


def test_a_save_of_other_prompts_is_discarded(
    llama_folder, uninterrupted, monkeypatch, caplog, tmp_path
):
    path = tmp_path / ".resume" / "depth.csv.pt"
    saves = ProgressSaves(path, "inputs", 0)
    killed_run(monkeypatch, saves, 1, folder=llama_folder, prompts=PROMPTS[::-1])
    computed = counted_prompts(monkeypatch)
    with caplog.at_level(logging.INFO, logger="layerlaws"):
        result = measured(llama_folder, ProgressSaves(path, "inputs", 0))
    assert f"measured prompts are not the first of this job's {UNITS}" in caplog.text
    assert computed == PROMPTS * 2
    assert_same(result, uninterrupted)


def test_a_save_whose_prompt_files_are_gone_is_discarded(
    llama_folder, uninterrupted, monkeypatch, caplog, tmp_path
):
    path = tmp_path / ".resume" / "depth.csv.pt"
    killed_run(monkeypatch, ProgressSaves(path, "inputs", 0), 4, folder=llama_folder)
    (tmp_path / ".resume" / "depth.csv.prompts" / "trained-1.prompt").unlink()
    computed = counted_prompts(monkeypatch)
    with caplog.at_level(logging.INFO, logger="layerlaws"):
        result = measured(llama_folder, ProgressSaves(path, "inputs", 0))
    assert "1 of its 4 measured prompts have no file" in caplog.text
    assert "resuming the coupling" not in caplog.text and computed == PROMPTS * 2
    assert_same(result, uninterrupted)


def test_a_run_that_does_not_resume_removes_the_save_of_the_files_it_overwrites(
    llama_folder, uninterrupted, monkeypatch, tmp_path
):
    """A run of other settings, killed before its first save, has overwritten the first
    prompt's file of a save it discarded: that save is gone, so a rerun of the first
    settings measures every prompt again instead of resuming onto the other's file."""
    path = tmp_path / ".resume" / "depth.csv.pt"
    killed_run(monkeypatch, ProgressSaves(path, "inputs", 0), 1, folder=llama_folder)
    real_measure = prompt_set.measure_prompt

    def measure_once(model, input_ids, **kwargs):
        if (tmp_path / ".resume" / "depth.csv.prompts" / "trained-0.prompt").exists():
            raise Killed
        return real_measure(model, input_ids, **kwargs)

    other = dataclasses.replace(SETTINGS, lss_window=3)
    with monkeypatch.context() as patched, pytest.raises(Killed):
        patched.setattr(prompt_set, "measure_prompt", measure_once)
        measured(llama_folder, ProgressSaves(path, "other", 60), settings=other)
    assert not path.exists()
    computed = counted_prompts(monkeypatch)
    result = measured(llama_folder, ProgressSaves(path, "inputs", 0))
    assert computed == PROMPTS * 2
    assert_same(result, uninterrupted)


COUPLING = "results/coupling/tiny-llama/few"
OUTPUTS = [f"{COUPLING}/{path}" for name, path in MEASURED.items() if name != "prompts"]


CONFIG = {
    "coupling": {
        "prompts": {"few": {"texts": ["the cat is here", "a b c d e", "is the sum of two"]}},
        "runs": [{"model": "tiny-llama", "prompts": "few"}],
        "ks": [2, 3],
        "token_layers": [[2, 4]],
        "svd": "randomized",
        "lss_window": 2,
        "keep_arrays": 2,
    },
}


def workflow_config(llama_folder, tmp_path, shards: int = 1) -> dict:
    """The coupling of the tiny Llama on three prompts in ``shards`` jobs, with a save
    after every prompt (three prompts under two weights: five saves in one job)."""
    models = {"tiny-llama": {"source": {"kind": "local", "path": str(llama_folder)}}}
    execution = {"checkpoint_minutes": 0, "lock_dir": str(tmp_path / "locks")}
    coupling = CONFIG["coupling"] | {"shards": shards}
    return {"models": models, "coupling": coupling, "execution": execution}


@pytest.fixture(scope="module")
def one_job(llama_folder, tmp_path_factory):
    """A workflow folder whose coupling ran as one uninterrupted job."""
    finished = tmp_path_factory.mktemp("one-job")
    write_config(finished, workflow_config(llama_folder, finished))
    run_ok(finished, OUTPUTS[0])
    return finished


@pytest.mark.slow
def test_a_count_keeps_that_many_prompts_arrays_and_token_rows_and_every_prompts_others(one_job):
    folder = one_job / COUPLING
    for table in ("depth.csv", "token_means.csv", "trajectories/layers.csv"):
        rows = pl.read_csv(folder / table, infer_schema=False)
        assert set(rows["prompt"]) - {"mean"} == {"0", "1", "2"}, table
    tokens = pl.read_csv(folder / "tokens.csv", infer_schema=False)
    assert set(tokens["prompt"]) == {"0", "1"}
    with np.load(folder / "trajectories/streams.npz") as streams:
        assert sorted(streams.files) == [f"{w}/{p}" for w in ("random", "trained") for p in (0, 1)]
    with np.load(folder / "factors.npz") as factors:
        assert {name.rsplit("/", 1)[0] for name in factors.files} == {
            f"{w}/{p}" for w in ("random", "trained") for p in (0, 1)
        }
    with np.load(folder / "couplings.npz") as couplings:
        assert {name for name in couplings.files if name.startswith("depth/")} == {
            f"depth/{w}/{p}" for w in ("random", "trained") for p in (0, 1, "mean_abs")
        }


def test_the_files_of_prompts_not_kept_hold_no_arrays(llama_folder, uninterrupted, tmp_path):
    """Prompts measured with prompts 0 and 1 kept: the third's files hold its rows but the
    token-wise ones (their statistics kept) and depth matrices (for the mean |A|) but no
    streams, factors or token matrices; the outputs written from them the uninterrupted
    tables and mean |A|, and the token-wise rows and arrays of prompts 0 and 1 alone."""
    twins = coupling_twins(llama_folder, None, "float32", "cpu", SETTINGS.init_seed)
    coupling = TokenCoupling.of(SETTINGS, 4)
    kept = {0, 1}
    files = measured_files(
        twins, PROMPTS, tmp_path / "prompts", settings=SETTINGS, token_coupling=coupling, kept=kept
    )
    for weights in ("trained", "random"):
        unkept = files.read(weights, 2)
        assert unkept.streams is None and unkept.factors == {} and unkept.token_couplings is None
        assert unkept.depth_couplings.shape == (4, 4, 2, 2) and unkept.tokens == []
        assert unkept.token_means
        assert files.read(weights, 1).streams.shape == (5, 4, 24)  # (L + 1, T, d)
    result = written(files, PROMPTS, coupling, SETTINGS, kept=kept)
    for name in TABLES:
        expected = getattr(uninterrupted, name)
        if name == "tokens":
            assert set(expected["prompt"]) == {"0", "1", "2"}
            expected = expected.filter(pl.col("prompt") != "2")
        assert getattr(result, name).equals(expected), name
    for name in ARRAYS:
        every, arrays = getattr(uninterrupted, name), getattr(result, name)
        assert list(arrays) == [key for key in every if "/2" not in key], name
        for key, array in arrays.items():
            assert np.array_equal(array, every[key]), f"{name} {key}"


def assert_same_outputs(workdir, expected):
    """Every coupling output of ``workdir`` equals ``expected``'s, bit for bit."""
    for output in OUTPUTS:
        found, reference = workdir / output, expected / output
        if output.endswith(".csv"):
            read = [pl.read_csv(path, infer_schema=False) for path in (found, reference)]
            assert read[1].height > 0 and read[0].equals(read[1]), output
            continue
        found, reference = np.load(found), np.load(reference)
        assert reference.files and found.files == reference.files, output
        for name in reference.files:
            assert np.array_equal(found[name], reference[name]), f"{output} {name}"


@pytest.mark.slow
def test_a_killed_coupling_job_resumes_to_the_uninterrupted_outputs(one_job, tmp_path):
    workdir = tmp_path / "killed"
    shutil.copytree(one_job, workdir, symlinks=True)
    environment = killing_environment(tmp_path / "fault")

    killed = snakemake(workdir, OUTPUTS[0], "--forcerun", "measure_coupling", env=environment)
    assert killed.returncode != 0
    assert killed_saves(tmp_path / "fault") == [f"{COUPLING}/.resume/depth.csv.pt"]
    assert not (workdir / OUTPUTS[0]).exists()

    run_ok(workdir, OUTPUTS[0], env=environment)
    log = (workdir / "results/logs/measure_coupling/tiny-llama/few.log").read_text()
    assert "resuming the coupling after 1 of 6 prompts" in log, log
    assert_same_outputs(workdir, one_job)
    assert not (workdir / COUPLING / ".resume").exists()


@pytest.mark.slow
def test_sharded_coupling_merges_to_the_one_job_outputs_and_killed_shards_resume(
    llama_folder, one_job, tmp_path
):
    """Two shards (prompts 0 and 2, prompt 1), each killed after its first save, resumed,
    and merged: the outputs of the one uninterrupted job, bit for bit."""
    workdir = tmp_path / "sharded"
    shutil.copytree(one_job, workdir, symlinks=True)
    write_config(workdir, workflow_config(llama_folder, workdir, shards=2))
    for output in OUTPUTS:
        (workdir / output).unlink()
    environment = killing_environment(tmp_path / "fault")

    killed = snakemake(workdir, OUTPUTS[0], "--keep-going", env=environment)
    assert killed.returncode != 0
    shard_saves = [f"{COUPLING}/shards/.resume/{shard}.pt.pt" for shard in (0, 1)]
    assert killed_saves(tmp_path / "fault") == shard_saves

    run_ok(workdir, OUTPUTS[0], env=environment)
    logs = workdir / "results/logs/measure_coupling_shard/tiny-llama/few"
    resumed = {"0": "after 1 of 4 prompts", "1": "after 1 of 2 prompts"}
    for save in killed_saves(tmp_path / "fault"):
        shard = save.split("/")[-1].split(".")[0]
        assert f"resuming the coupling {resumed[shard]}" in (logs / f"{shard}.log").read_text()
    assert sorted(path.name for path in (workdir / COUPLING / "shards").iterdir()) == [
        "0.pt",
        "1.pt",
    ]
    assert_same_outputs(workdir, one_job)


def test_shards_of_a_prompt_set_combine_to_the_one_job_tables(
    llama_folder, uninterrupted, tmp_path
):
    """Three prompts in two shards (prompts 0 and 2, prompt 1), measured apart as two jobs
    would, each written into its archive, and merged from the archives: the tables and
    arrays of one job, bit for bit."""
    twins = coupling_twins(llama_folder, None, "float32", "cpu", SETTINGS.init_seed)
    coupling = TokenCoupling.of(SETTINGS, 4)
    archives = []
    for shard in (1, 0):
        indices = shard_indices(len(PROMPTS), shard, 2)
        assert list(indices) == ([0, 2] if shard == 0 else [1])
        files = measured_files(
            twins,
            PROMPTS,
            tmp_path / f"{shard}.prompts",
            settings=SETTINGS,
            token_coupling=coupling,
            indices=indices,
        )
        archives.append(tmp_path / f"{shard}.pt")
        write_shard(archives[-1], files)
    combined = written(ShardArchives(archives, len(PROMPTS)), PROMPTS, coupling, SETTINGS)
    assert_same(combined, uninterrupted)


def test_shards_that_miss_a_prompt_or_cannot_be_read_are_refused(tmp_path):
    """An archive that lacks a prompt of the set, and one that is no archive, each stop
    the merge with what to do."""
    files = prompt_set.PromptFiles(tmp_path / "prompts", (("trained", 0), ("random", 0)))
    for weights, index in files.units:
        files.path(weights, index).parent.mkdir(exist_ok=True)
        files.path(weights, index).write_bytes(b"")
    write_shard(tmp_path / "0.pt", files)
    with pytest.raises(LayerlawsError, match="hold 2 prompt measurements, not the 4 of 2"):
        ShardArchives([tmp_path / "0.pt"], 2)
    (tmp_path / "1.pt").write_bytes(b"not an archive")
    with pytest.raises(LayerlawsError, match=r"cannot read the coupling shard .*1\.pt"):
        ShardArchives([tmp_path / "0.pt", tmp_path / "1.pt"], 1)
