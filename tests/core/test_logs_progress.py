"""ProgressLog: a line every so often with the steps done, the rate and the time left."""

from __future__ import annotations

import logging

import pytest

from layerlaws.core.logs import ProgressLog, duration


class Clock:
    """A clock the test moves by hand."""

    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


@pytest.mark.parametrize(
    ("seconds", "text"),
    [(0, "0 s"), (44.6, "45 s"), (190, "3 min 10 s"), (7500, "2 h 05 min"), (-3, "0 s")],
)
def test_durations_read_as_a_person_reads_them(seconds, text):
    assert duration(seconds) == text


def test_a_line_every_interval_and_at_the_end_with_the_time_left(caplog):
    clock = Clock()
    progress = ProgressLog("forward pass", 40, "batches", every=30, clock=clock)
    with caplog.at_level(logging.INFO, logger="layerlaws"):
        for step in range(1, 41):
            clock.now += 3.0  # 3 s a batch: 20 batches a minute
            progress.update(step, "9 tokens/s")
    lines = [record.getMessage() for record in caplog.records]
    # At 30 s, 60 s, 90 s (steps 10, 20, 30) and the last step.
    assert lines == [
        "forward pass: 10 of 40 batches (25%), 20 batches/min, 9 tokens/s, 1 min 30 s left",
        "forward pass: 20 of 40 batches (50%), 20 batches/min, 9 tokens/s, 1 min 00 s left",
        "forward pass: 30 of 40 batches (75%), 20 batches/min, 9 tokens/s, 30 s left",
        "forward pass: 40 of 40 batches (100%), 20 batches/min, 9 tokens/s, 0 s left",
    ]


def test_a_resumed_loop_counts_its_rate_from_where_it_resumed(caplog):
    clock = Clock()
    progress = ProgressLog("coupling", 100, "prompts", done=90, every=0, clock=clock)
    with caplog.at_level(logging.INFO, logger="layerlaws"):
        clock.now += 60.0
        progress.update(95)
    assert caplog.records[0].getMessage() == (
        "coupling: 95 of 100 prompts (95%), 5 prompts/min, 1 min 00 s left"
    )


def test_no_rate_before_a_step_is_timed(caplog):
    clock = Clock()
    progress = ProgressLog("coupling", 2, "prompts", every=0, clock=clock)
    with caplog.at_level(logging.INFO, logger="layerlaws"):
        progress.update(0)
    assert caplog.records[0].getMessage() == "coupling: 0 of 2 prompts (0%)"
