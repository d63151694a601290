"""Every failure of a job reaches its log: a user's problem as one line, a bug with its
traceback."""

import pytest

from layerlaws.core.errors import LayerlawsError
from layerlaws.core.logs import run_logged


def fail_with(error: Exception):
    def step() -> None:
        raise error

    return step


def test_unexpected_errors_are_logged_with_their_traceback(tmp_path):
    log = tmp_path / "logs" / "job.log"
    with pytest.raises(SystemExit) as exit_info:
        run_logged(fail_with(ValueError("stack expects equal sizes")), str(log))
    assert exit_info.value.code == 1
    text = log.read_text()
    assert "Traceback (most recent call last)" in text
    assert "ValueError: stack expects equal sizes" in text


def test_problems_a_user_can_fix_are_one_clear_line(tmp_path):
    log = tmp_path / "job.log"
    with pytest.raises(SystemExit) as exit_info:
        run_logged(fail_with(LayerlawsError("lower max_tokens")), str(log))
    assert exit_info.value.code == 1
    assert "ERROR layerlaws: lower max_tokens" in log.read_text()
    assert "Traceback" not in log.read_text()


def test_a_successful_step_logs_and_returns(tmp_path):
    log = tmp_path / "job.log"

    def step() -> None:
        import logging

        logging.getLogger("layerlaws").info("done")

    run_logged(step, str(log))
    assert "INFO layerlaws: done" in log.read_text()
