"""A training over several processes (``training.<key>.gpus``): on the CPU, 2 processes that
torchrun starts with the gloo backend, each reading its half of every step's batch, end
with the weights of one process over the same global batch, and a segment of either
resumes from a save of the other; a batch that does not split over the processes is a
clear error."""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch
from conftest import TINY_TRAINING
from numpy.testing import assert_allclose
from safetensors.numpy import load_file
from snakemake_runs import run_ok, write_config

from layerlaws.core.errors import LayerlawsError
from layerlaws.models.loading import load_tokenizer
from layerlaws.training.parallel import check_split, chosen_gpus, rank_rows
from layerlaws.training.plan import TrainingSpec, checkpoint_folder
from layerlaws.training.segment_job import SegmentJob, launch, run_segment
from layerlaws.training.train import model_config, train
from layerlaws.training.workflow import check_trainings

# Steps 0-2 and 2-4 as two segments (a resume point at 2); every run passes at most 2
# sequences at a time, so one process runs each step's 4 sequences in 2 passes and each of
# 2 processes its 2 in one.
SETTINGS = {
    **TINY_TRAINING,
    "steps": 4,
    "checkpoints": [0, 4],
    "segment_steps": 2,
    "micro_batch_size": 2,
}
STEPS = 4


@pytest.fixture
def files(corpus, tmp_path):
    """The corpus as the segment jobs read it: a tokenizer folder and two .npy files."""
    tokenizer, sequences, held_out = corpus
    tokenizer.save_pretrained(tmp_path / "tokenizer")
    np.save(tmp_path / "sequences.npy", sequences)
    np.save(tmp_path / "held_out.npy", held_out)
    return tmp_path


@pytest.fixture
def one_thread():
    """One CPU thread in this process, as in each of the 2 processes, so that a pass's
    arithmetic is the same in both; the test process's threads restored after."""
    threads = torch.get_num_threads()
    yield
    torch.set_num_threads(threads)


def job(files, name: str, end: int) -> SegmentJob:
    return SegmentJob(
        settings=SETTINGS,
        end=end,
        tokenizer=str(files / "tokenizer"),
        sequences=str(files / "sequences.npy"),
        held_out=str(files / "held_out.npy"),
        folder=str(files / name),
        record=str(files / f"{name}-step{end}.json"),
        threads=1,
        devices="cpu",
    )


def in_one(files, name: str, end: int) -> None:
    run_segment(job(files, name, end), "cpu")


def in_two(files, name: str, end: int) -> None:
    launch(job(files, name, end), 2, ())


def weights(files, name: str, step: int) -> dict[str, np.ndarray]:
    return load_file(str(checkpoint_folder(files / name, step) / "model.safetensors"))


def assert_same(a: dict[str, np.ndarray], b: dict[str, np.ndarray], steps: int) -> None:
    """Every weight equal within float32 rounding of ``steps`` updates. Each gradient is the
    sum of 2 halves of the batch in both runs (one process: its 2 passes weighted 1/2
    accumulated; two: each rank's pass averaged by the all-reduce), rounded once in an
    order that may differ; AdamW turns it into an update of at most about the learning rate,
    so each step adds at most a rounding of the weight itself: rtol steps × eps32."""
    assert a.keys() == b.keys()
    tolerance = steps * np.finfo(np.float32).eps
    for name in a:
        assert_allclose(a[name], b[name], rtol=tolerance, atol=tolerance, err_msg=name)


def test_two_processes_train_as_one_and_resume_each_other(files, one_thread) -> None:
    in_one(files, "whole", STEPS)  # uninterrupted, one process
    in_two(files, "two_then_one", 2)
    in_one(files, "one_then_two", 2)
    after_two = weights(files, "two_then_one", 2)
    assert_same(after_two, weights(files, "one_then_two", 2), 2)
    # the resume points differ from the initialisation: the test compares trained weights
    first = weights(files, "whole", 0)
    assert not any(np.array_equal(after_two[name], first[name]) for name in first)
    in_one(files, "two_then_one", STEPS)  # one process from two processes' resume point
    in_two(files, "one_then_two", STEPS)  # two from one's
    whole = weights(files, "whole", STEPS)
    assert_same(weights(files, "two_then_one", STEPS), whole, STEPS)
    assert_same(weights(files, "one_then_two", STEPS), whole, STEPS)
    # rank 0 wrote the record, its loss the global batch's mean
    record = json.loads((files / f"one_then_two-step{STEPS}.json").read_text())
    reference = json.loads((files / f"whole-step{STEPS}.json").read_text())
    assert record["resumed_from_step"] == 2 and record["device"] == "cpu"
    losses = [[row["train_loss"] for row in r["curve"]] for r in (record, reference)]
    assert_allclose(losses[0], losses[1][-2:], rtol=STEPS * np.finfo(np.float32).eps)
    assert not (files / "one_then_two" / "step_000002").exists()  # the resume point went


def test_a_batch_that_does_not_split_over_the_processes_is_refused() -> None:
    config = {
        "training": {"tiny": {**TINY_TRAINING, "batch_size": 5, "gpus": 2, "held_out": None}},
        "models": {"m": {}},
        "datasets": {"d": {}},
        "execution": {"gpus_per_node": 8},
    }
    config["training"]["tiny"] |= {"tokenizer": "m", "dataset": "d"}
    with pytest.raises(LayerlawsError) as raised:
        check_trainings(config)
    assert str(raised.value) == (
        "config training.tiny: batch_size 5 does not split over 2 processes; every process "
        "reads batch_size / gpus sequences a step: make batch_size a multiple of 2 or set "
        "training.tiny.gpus to a divisor of it"
    )
    config["training"]["tiny"] |= {"batch_size": 16, "gpus": 16}
    with pytest.raises(LayerlawsError, match="gpus 16 is more than one node holds"):
        check_trainings(config)
    config["training"]["tiny"]["gpus"] = 8
    check_trainings(config)
    with pytest.raises(LayerlawsError, match="batch_size 5 does not split over 2"):
        check_split(5, 2)  # what each process checks before its first step


def test_each_rank_reads_its_slice_of_the_global_batch() -> None:
    rows = np.arange(10, 17)
    slices = [rank_rows(rows, rank, 3) for rank in range(3)]
    assert [s.tolist() for s in slices] == [[10, 11, 12], [13, 14], [15, 16]]
    with pytest.raises(LayerlawsError, match="fewer than its 8 processes"):
        rank_rows(rows, 0, 8)


def test_auto_spreads_a_training_over_the_largest_divisor_of_its_batch() -> None:
    assert chosen_gpus("auto", 16, available=8, per_node=8) == 8
    assert chosen_gpus("auto", 16, available=6, per_node=8) == 4
    assert chosen_gpus("auto", 16, available=32, per_node=4) == 4
    assert chosen_gpus("auto", 12, available=8, per_node=8) == 6
    assert chosen_gpus("auto", 16, available=1, per_node=8) == 1
    assert chosen_gpus(3, 16, available=8, per_node=8) == 3


def test_a_segment_of_two_processes_through_snakemake(
    llama_folder, corpus_file, tmp_path, one_thread
) -> None:
    """A training of ``gpus: 2`` under ``execution.device: cpu``: its segment's job runs 2
    gloo processes and ends with the weights of one ``train`` call on the same packed
    tokens."""
    files = {"kind": "files", "paths": [str(corpus_file)]}
    settings = {**SETTINGS, "checkpoints": [4], "segment_steps": None}
    config = {
        "models": {"tiny-llama": {"source": {"kind": "local", "path": str(llama_folder)}}},
        "datasets": {"rest": {"source": files, "n_samples": "all"}},
        "training": {"tiny": settings | {"tokenizer": "tiny-llama", "dataset": "rest", "gpus": 2}},
        "execution": {"device": "cpu", "lock_dir": str(tmp_path / "locks")},
    }
    workdir = tmp_path / "workflow"
    write_config(workdir, config)
    run_ok(workdir, "results/training/tiny/reached/step4.json")
    training = workdir / "results/training/tiny"
    record = json.loads((training / "reached/step4.json").read_text())
    assert record["device"] == "2 × cpu" and record["resumed_from_step"] is None
    lines = (workdir / "results/logs/train_checkpoint/tiny/4.log").read_text().splitlines()
    assert any("| " in line and "step 4/4: training loss" in line for line in lines), lines
    assert "used" in lines[-1] and "| " not in lines[-1]  # the job's own last line
    torch.set_num_threads(1)
    spec = TrainingSpec.of(settings)
    tokenizer = load_tokenizer(workdir / "results/models/tiny-llama")
    train(
        spec,
        model_config(spec, tokenizer),
        tokenizer,
        np.load(training / "sequences.npy"),
        held_out=None,
        folder=tmp_path / "one",
        device="cpu",
    )
    one = load_file(str(checkpoint_folder(tmp_path / "one", STEPS) / "model.safetensors"))
    two = load_file(str(checkpoint_folder(training / "checkpoints", STEPS) / "model.safetensors"))
    assert_same(two, one, STEPS)
