"""Progress saves: what the fingerprint covers, saves from other inputs or unreadable files
discarded with a log line, a pass interrupted after a save resuming to the statistics of an
uninterrupted pass, the file gone once the job is done, and a save on a full disk one line
that leaves no partial file, its rerun resuming from the last complete save."""

from __future__ import annotations

import logging
import os

import polars as pl
import pytest
import torch
from disk_faults import error_lines, run_python

from layerlaws.core import progress
from layerlaws.core.progress import ProgressSaves, fingerprint, resume_path
from layerlaws.equilearning.evaluation import HeldOutEvaluation
from layerlaws.equilearning.fuzziness import SeparationFuzziness, counted_classes
from layerlaws.equilearning.settings import FuzzinessSettings
from layerlaws.equilearning.statistics import EquilearningStatistics
from layerlaws.forward.model_pass import run_forward_pass
from layerlaws.models.loading import load_model
from tests.forward.test_forward_pass import tokenised


class Interrupted(Exception):
    """Stands for a kill right after a save (the real SIGKILL: tests/workflow/test_resume.py)."""


def test_fingerprint_covers_contents_settings_and_large_files_by_size(tmp_path, monkeypatch):
    data, folder = tmp_path / "tokens.parquet", tmp_path / "model"
    data.write_bytes(b"abc")
    folder.mkdir()
    (folder / "weights.bin").write_bytes(b"0" * 100)
    reference = fingerprint([data, folder], {"offsets": [1]})
    assert fingerprint([data, folder], {"offsets": [1]}) == reference
    assert fingerprint([data, folder], {"offsets": [1, 2]}) != reference
    data.write_bytes(b"abd")
    assert fingerprint([data, folder], {"offsets": [1]}) != reference
    data.write_bytes(b"abc")
    (folder / "weights.bin").write_bytes(b"1" * 100)
    assert fingerprint([data, folder], {"offsets": [1]}) != reference
    # Over HASHED_BYTES a file counts by name, size and modification time, not content.
    monkeypatch.setattr(progress, "HASHED_BYTES", 10)
    large = fingerprint([folder], {})
    stat = (folder / "weights.bin").stat()
    (folder / "weights.bin").write_bytes(b"2" * 100)
    os.utime(folder / "weights.bin", ns=(stat.st_atime_ns, stat.st_mtime_ns))
    assert fingerprint([folder], {}) == large
    (folder / "weights.bin").write_bytes(b"2" * 101)
    assert fingerprint([folder], {}) != large


def test_a_save_is_resumed_only_from_the_same_inputs(tmp_path, caplog):
    path = resume_path(tmp_path / "out" / "pr.csv")
    assert path == tmp_path / "out" / ".resume" / "pr.csv.pt"
    ProgressSaves(path, "a" * 64, 0).save({"sums": torch.arange(3.0)}, "batch 1 of 3")
    with caplog.at_level(logging.INFO):
        state = ProgressSaves(path, "a" * 64, 0).load()
    assert torch.equal(state["sums"], torch.arange(3.0))
    assert "resuming from" in caplog.text and "batch 1 of 3" in caplog.text
    caplog.clear()
    assert ProgressSaves(path, "b" * 64, 0).load() is None
    assert "discarding the progress save" in caplog.text and "other inputs" in caplog.text
    caplog.clear()
    path.write_bytes(b"not a save")
    assert ProgressSaves(path, "a" * 64, 0).load() is None
    assert "discarding the unreadable progress save" in caplog.text


def test_saves_are_spaced_by_the_minutes_and_removed_when_done(tmp_path):
    path = resume_path(tmp_path / "pr.csv")
    rare = ProgressSaves(path, "f", every_minutes=10)
    assert not rare.save_if_due({}, "batch 1") and not path.exists()
    often = ProgressSaves(path, "f", every_minutes=0)
    assert often.save_if_due({}, "batch 1") and often.save_if_due({}, "batch 2")
    cost = often.finish()
    assert cost["progress_saves"] == 2 and cost["progress_save_seconds"] >= 0
    assert not path.exists() and not path.parent.exists()


def pass_observers(facts, tokens):
    """The statistics, fuzziness and evaluation observers of an equi-learning pass."""
    statistics = EquilearningStatistics(facts, [1, 2], ["model", "none"], ["token_id"], 0)
    classes = counted_classes(tokens, FuzzinessSettings(classes="all", min_rows=2, max_classes=100))
    fuzziness = SeparationFuzziness(facts, ["model", "none"], classes)
    return statistics, fuzziness, HeldOutEvaluation()


def tables(observers):
    statistics, fuzziness, evaluation = observers
    return [statistics.table(), fuzziness.table(), evaluation.table()]


@pytest.mark.parametrize("saved", ["same inputs", "other inputs", "other batches"])
def test_a_pass_interrupted_after_a_save_resumes_to_the_same_statistics(
    saved, llama_folder, texts, tmp_path, monkeypatch, caplog
):
    """A save of the same inputs resumes after its batches; one of other inputs, or of
    the same inputs but other batches merged (its batch hash altered), is discarded with a
    log line and the pass starts again: every table equals the uninterrupted pass's."""
    facts, tokens = tokenised(llama_folder, texts[:12], tmp_path)
    model = load_model(tmp_path / "m", "float32", "cpu")

    def run(saves):
        statistics, fuzziness, evaluation = observers = pass_observers(facts, tokens)
        report = run_forward_pass(
            model, facts, tokens, [statistics, fuzziness], 3, "cpu", False, [evaluation], saves
        )
        return report, tables(observers)

    _, uninterrupted = run(None)
    path = resume_path(tmp_path / "out" / "pr.csv")
    interrupting = ProgressSaves(path, "inputs", every_minutes=0)
    save = ProgressSaves.save

    def save_then_stop(self, state, done):
        save(self, state, done)
        if self.n_saves == 2:
            raise Interrupted

    monkeypatch.setattr(ProgressSaves, "save", save_then_stop)
    with pytest.raises(Interrupted):
        run(interrupting)
    monkeypatch.setattr(ProgressSaves, "save", save)
    if saved == "other batches":
        record = torch.load(path, weights_only=False)
        record["state"]["batches_hash"] = "0" * 64
        torch.save(record, path)
    with caplog.at_level(logging.WARNING, logger="layerlaws"):
        report, resumed = run(
            ProgressSaves(path, "other" if saved == "other inputs" else "inputs", 0)
        )
    assert report["batches_resumed"] == (2 if saved == "same inputs" else 0)
    assert ("discarding the progress save" in caplog.text) == (saved != "same inputs")
    for ours, reference in zip(resumed, uninterrupted, strict=True):
        assert ours.equals(reference), pl.concat([ours, reference], how="horizontal")


PROGRESS_JOB = """
import sys
import torch
from layerlaws.core.logs import run_logged
from layerlaws.core.progress import ProgressSaves

def job():
    saves = ProgressSaves(sys.argv[1], "inputs", every_minutes=0)
    state = saves.load()
    first = 1 if state is None else state["done"] + 1
    print("starts at unit", first)
    for done in range(first, 3):  # the second unit's statistics are large (400 kB)
        saves.save({"done": done, "sums": torch.zeros(10 ** (1 + 4 * (done - 1)))}, f"{done} of 2")
    saves.finish()

run_logged(job, None)
"""


@pytest.mark.parametrize(
    ("file_size", "restart_at"),
    [(64 * 2**10, 2), (512, 1)],
    ids=["after-a-save", "before-any-save"],
)
def test_a_save_on_a_full_disk_is_one_line_and_the_rerun_resumes(tmp_path, file_size, restart_at):
    """A job whose save meets a full disk (RLIMIT_FSIZE: the second save, or the first)
    stops with one line naming the save and leaves no partial file (nor a ``.resume/`` it
    made); run again with room, it resumes from the last complete save, or starts afresh."""
    path = resume_path(tmp_path / "out" / "pr.csv")
    full = run_python(PROGRESS_JOB, str(path), file_size=file_size)
    assert full.returncode == 1, full.stderr
    [line] = error_lines(full.stderr)
    assert f"could not write {path}: File too large. Free space on its disk" in line
    assert "Traceback" not in full.stderr
    saved = [path] if restart_at == 2 else []
    assert sorted((tmp_path / "out").rglob("*")) == ([path.parent, *saved] if saved else [])
    rerun = run_python(PROGRESS_JOB, str(path))
    assert rerun.returncode == 0, rerun.stderr
    assert f"starts at unit {restart_at}" in rerun.stdout
    assert ("resuming from" in rerun.stderr) == (restart_at == 2)
    assert not path.parent.exists()


def test_an_empty_or_partial_resume_folder_does_not_break_a_rerun(tmp_path):
    path = resume_path(tmp_path / "pr.csv")
    path.parent.mkdir()
    (path.parent / f".{path.name}.tmp-0123abcd").write_bytes(b"PK\x03\x04 half a save")
    saves = ProgressSaves(path, "inputs", every_minutes=0)
    assert saves.load() is None
    saves.save({"done": 1}, "1 of 1")
    saves.finish()
    assert list(tmp_path.iterdir()) == []
