"""A training in segments, one per checkpoint (and one to the last step, and with
segment_steps one every that many steps): each goes on from its predecessor's save and the
whole ends bit-identical to one uninterrupted run, weights, curve and checkpoint table
included; through Snakemake, each checkpoint's model waits for its own segment only."""

from __future__ import annotations

import copy
import json
import re

import numpy as np
import polars as pl
import pytest
import torch
from conftest import TINY_TRAINING
from safetensors.torch import load_file
from snakemake_runs import run_ok, scheduled_jobs, write_config

from layerlaws.core.errors import LayerlawsError
from layerlaws.models.loading import load_tokenizer
from layerlaws.training.plan import (
    TrainingSpec,
    checkpoint_folder,
    previous_segment_end,
    segment_ends,
)
from layerlaws.training.segments import (
    checkpoint_rows,
    segment_record,
    training_curve,
    training_summary,
)
from layerlaws.training.train import STATE_FILE, model_config, train


def spec_of(**changes) -> TrainingSpec:
    return TrainingSpec.of({**TINY_TRAINING, **changes})


def run(spec, corpus, folder, until=None):
    tokenizer, sequences, held_out = corpus
    config = model_config(spec, tokenizer)
    return train(
        spec,
        config,
        tokenizer,
        sequences,
        held_out=held_out,
        folder=folder,
        device="cpu",
        until=until,
    )


def assert_same_weights(folder_a, folder_b, steps) -> None:
    for step in steps:
        a = load_file(str(checkpoint_folder(folder_a, step) / "model.safetensors"))
        b = load_file(str(checkpoint_folder(folder_b, step) / "model.safetensors"))
        assert a.keys() == b.keys()
        assert all(torch.equal(a[name], b[name]) for name in a), step


def segmented(spec, corpus, folder) -> list[dict]:
    """Every segment of ``spec`` run in turn, as the workflow's jobs run them: their
    records."""
    records = []
    for end in segment_ends(spec):
        segment = run(spec, corpus, folder, until=end)
        records.append(
            segment_record(
                spec,
                segment.curve,
                end,
                resumed_from=segment.resumed_from,
                seconds=segment.seconds,
                device="cpu",
            )
        )
    return records


def test_segments_end_at_every_checkpoint_and_the_last_step() -> None:
    """And with segment_steps at its multiples too, which change no fingerprint."""
    assert segment_ends(spec_of()) == (0, 2, 5, 12)
    assert segment_ends(spec_of(checkpoints=[2, 5])) == (2, 5, 12)
    assert segment_ends(spec_of(segment_steps=4)) == (0, 2, 4, 5, 8, 12)
    assert segment_ends(spec_of(segment_steps=12)) == segment_ends(spec_of())
    assert previous_segment_end(spec_of(), 5) == 2
    assert previous_segment_end(spec_of(segment_steps=4), 5) == 4
    assert previous_segment_end(spec_of(), 0) is None
    data = np.arange(6)
    assert spec_of(segment_steps=4).fingerprint(data) == spec_of().fingerprint(data)
    assert spec_of(micro_batch_size=2).fingerprint(data) != spec_of().fingerprint(data)


@pytest.mark.parametrize("segment_steps", [None, 3])
@pytest.mark.parametrize("checkpoints", [[0, 2, 5, 12], [2, 5]])
def test_segments_end_bit_identical_to_one_run(
    corpus, tmp_path, checkpoints, segment_steps
) -> None:
    """Also when the last step is no checkpoint: its segment saves no weights but ends the
    curve; and in segments of at most 3 steps, ending between the held-out evaluations
    (every 4 steps): a resume point is removed once a later save holds the state."""
    spec = spec_of(checkpoints=checkpoints, segment_steps=segment_steps)
    whole = run(spec, corpus, tmp_path / "whole")
    records = segmented(spec, corpus, tmp_path / "segments")
    assert [record["resumed_from_step"] for record in records] == [
        previous_segment_end(spec, end) for end in segment_ends(spec)
    ]
    assert_same_weights(tmp_path / "whole", tmp_path / "segments", spec.checkpoints)
    curve = training_curve(records)
    assert curve == whole.curve
    # The curve carried in the training state is the whole run's too.
    assert run(spec, corpus, tmp_path / "segments").curve == whole.curve
    assert checkpoint_rows(spec, curve) == [
        {name: row[name] for name in row if name != "fingerprint"} for row in whole.checkpoints
    ]
    # The state is kept only in the latest save (a checkpoint, or a resume point before the
    # last step when that is no checkpoint), as in one run; the other resume points are gone.
    saves = [end for end in segment_ends(spec) if end in spec.checkpoints or end < spec.steps]
    kept = sorted({*spec.checkpoints, saves[-1]})
    folders = sorted((tmp_path / "segments").iterdir())
    assert folders == [checkpoint_folder(tmp_path / "segments", step) for step in kept]
    assert [folder for folder in folders if (folder / STATE_FILE).exists()] == [
        checkpoint_folder(tmp_path / "segments", saves[-1])
    ]
    summary = training_summary(records, {"texts": 60})
    trained = sum(record["trained_tokens"] for record in records)
    assert trained == spec.tokens_seen(spec.steps) and summary["texts"] == 60
    assert summary["resumed_from_step"] == records[-1]["resumed_from_step"]


def test_rerun_segments_train_only_what_lacks_a_state(corpus, tmp_path) -> None:
    """A segment whose checkpoint holds the state trains nothing; an early segment rerun
    after later ones dropped its predecessor's state trains from scratch, rewriting only
    its own checkpoint, and to the same weights."""
    spec = spec_of()
    segmented(spec, corpus, tmp_path / "run")
    last = run(spec, corpus, tmp_path / "run", until=12)
    assert last.resumed_from == 12 and last.curve[-1]["step"] == 12
    kept = checkpoint_folder(tmp_path / "run", 2) / "model.safetensors"
    written = kept.stat().st_mtime_ns
    rerun = run(spec, corpus, tmp_path / "run", until=5)
    assert rerun.resumed_from is None
    assert kept.stat().st_mtime_ns == written
    whole = run(spec, corpus, tmp_path / "whole")
    assert_same_weights(tmp_path / "whole", tmp_path / "run", spec.checkpoints)
    assert rerun.curve == [row for row in whole.curve if row["step"] <= 5]


def test_a_training_stops_only_at_a_segment_end(corpus, tmp_path) -> None:
    with pytest.raises(LayerlawsError, match="not at step 7"):
        run(spec_of(), corpus, tmp_path, until=7)


@pytest.fixture(scope="module")
def training_config(llama_folder, corpus_file, tmp_path_factory):
    """TINY_TRAINING on the texts a probing dataset does not sample, with that dataset
    held out; one run measures its step-2 checkpoint."""
    files = {"kind": "files", "paths": [str(corpus_file)]}
    return {
        "models": {"tiny-llama": {"source": {"kind": "local", "path": str(llama_folder)}}},
        "datasets": {
            "mini": {"source": files, "n_samples": 30, "max_tokens": 24},
            "rest": {"source": files, "n_samples": "all", "exclude": ["mini"]},
        },
        "training": {
            "tiny": TINY_TRAINING
            | {"tokenizer": "tiny-llama", "dataset": "rest", "held_out": "mini"}
        },
        "runs": [{"model": "tiny@step2", "dataset": "mini"}],
        "execution": {"batch_size": 8, "lock_dir": str(tmp_path_factory.mktemp("locks"))},
    }


def test_each_checkpoint_model_waits_for_its_own_segment(training_config, tmp_path) -> None:
    """One segment job per checkpoint; the step-2 model needs the segments up to step 2
    only, not the training's end."""
    write_config(tmp_path, training_config)
    jobs = scheduled_jobs(tmp_path)
    assert jobs["train_checkpoint"] == 4
    assert jobs["pack_training_corpus"] == 1 and jobs["train_model"] == 1
    printed = run_ok(tmp_path, "--dry-run", "results/models/tiny@step2").stdout
    steps = re.findall(r"output: results/training/tiny/reached/step(\d+)\.json", printed)
    assert sorted(steps) == ["0", "2"]
    inputs = re.findall(
        r"rule prepare_model:\n    input: (.*)\n    output: results/models/tiny@step2\n",
        printed,
    )
    assert inputs == ["results/training/tiny/reached/step2.json"]


def test_segmented_training_through_snakemake_is_one_run(training_config, tmp_path) -> None:
    """The checkpoints, curve.csv and checkpoints.csv of the workflow's segments are those
    of one uninterrupted ``train`` call on the same packed tokens."""
    workdir = tmp_path / "workflow"
    write_config(workdir, training_config)
    run_ok(workdir, "results/training/tiny/training.json")
    training = workdir / "results/training/tiny"
    spec = TrainingSpec.of(TINY_TRAINING)
    tokenizer = load_tokenizer(workdir / "results/models/tiny-llama")
    whole = train(
        spec,
        model_config(spec, tokenizer),
        tokenizer,
        np.load(training / "sequences.npy"),
        held_out=np.load(training / "held_out_sequences.npy"),
        folder=tmp_path / "whole",
        device="cpu",
    )
    assert_same_weights(tmp_path / "whole", training / "checkpoints", spec.checkpoints)
    expected = tmp_path / "expected"
    expected.mkdir()
    pl.DataFrame(whole.curve, infer_schema_length=None).write_csv(expected / "curve.csv")
    pl.DataFrame(whole.checkpoints).drop("fingerprint").write_csv(expected / "checkpoints.csv")
    for name in ("curve.csv", "checkpoints.csv"):
        assert (training / name).read_text() == (expected / name).read_text(), name
    summary = json.loads((training / "training.json").read_text())
    assert summary["resumed_from_step"] == 5 and summary["held_out_sequences"] == 4
    records = [json.loads((training / f"reached/step{s}.json").read_text()) for s in (0, 2)]
    assert [record["resumed_from_step"] for record in records] == [None, 0]
    assert records[1]["held_out_loss"] == whole.checkpoints[1]["held_out_loss"]
    # How a job runs its steps changes no weight: its processes and torch.compile rerun nothing.
    config = copy.deepcopy(training_config)
    config["training"]["tiny"] |= {"gpus": 2, "compile": True}
    write_config(workdir, config)
    planned = run_ok(workdir, "--dry-run", "results/training/tiny/training.json").stdout
    assert "Nothing to be done" in planned, planned
