"""A sharded stage's three kinds of job (``ShardedJob``): a shard measures its every N-th
item and writes its shard, the whole job measures every item, the merging job reads the
shard files; only a job that measured removes what it kept and its progress save."""

from types import SimpleNamespace

import pytest

from layerlaws.core.shards import ShardedJob


class Saves:
    finished = 0

    def finish(self):
        self.finished += 1
        return {}


def ran(job: ShardedJob, count: int = 7) -> tuple[list, Saves]:
    """What ``job.run`` did, in order, with the saves it was given."""
    calls, saves = [], Saves()
    job.run(
        count,
        saves=lambda: saves,
        measure=lambda indices, given: calls.append(("measure", list(indices), given)) or "m",
        merge=lambda files: calls.append(("merge", list(files))) or "merged",
        write_shard=lambda measured: calls.append(("shard", measured)),
        write_outputs=lambda measured, given: calls.append(("outputs", measured, given)),
        written=lambda measured: calls.append(("written", measured)),
    )
    return calls, saves


@pytest.mark.parametrize(
    ("wildcards", "inputs", "expected", "finished"),
    [
        ({"shard": "1"}, {}, [("measure", [1, 4], "saves"), ("shard", "m"), ("written", "m")], 1),
        (
            {},
            {},
            [("measure", list(range(7)), "saves"), ("outputs", "m", "saves"), ("written", "m")],
            1,
        ),
        (
            {},
            {"shards": ["0.pt", "1.pt"]},
            [("merge", ["0.pt", "1.pt"]), ("outputs", "merged", None)],
            0,
        ),
    ],
    ids=["shard", "whole", "merge"],
)
def test_each_kind_of_job_measures_or_merges_and_writes_its_own(
    wildcards, inputs, expected, finished
):
    job = ShardedJob.of(3, wildcards, SimpleNamespace(**inputs))
    calls, saves = ran(job)
    given = [tuple(saves if part == "saves" else part for part in call) for call in expected]
    assert calls == given
    assert saves.finished == finished
    assert job.described() == ("; shard 1 of 3" if "shard" in wildcards else "")


def test_no_items_measure_nothing():
    calls, _ = ran(ShardedJob(2, shard=1), count=1)
    assert calls[0] == ("measure", [], calls[0][2])
