"""Every failure of a job reaches its log: a user's problem (a LayerlawsError, a full or
unwritable disk) as one line, a bug with its traceback."""

import errno
import signal
import subprocess
import sys

import pytest
from disk_faults import error_lines, read_only, run_python

from layerlaws.core.disk import disk_problem
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


def test_other_os_errors_keep_their_traceback(tmp_path):
    log = tmp_path / "job.log"
    missing = FileNotFoundError(errno.ENOENT, "No such file or directory", "results/x.json")
    with pytest.raises(SystemExit):
        run_logged(fail_with(missing), str(log))
    assert "Traceback (most recent call last)" in log.read_text()


def test_a_full_disk_behind_a_library_error_is_one_line():
    """torch.save raises its own RuntimeError while handling the OSError of the write."""
    try:
        try:
            raise OSError(errno.ENOSPC, "No space left on device", "results/.resume/x.pt")
        except OSError:
            raise RuntimeError("[enforce fail at inline_container.cc:672] unexpected pos") from None
    except RuntimeError as error:
        wrapped = error
    line = disk_problem(wrapped)
    assert line.startswith("could not write results/.resume/x.pt: No space left on device.")
    assert "Free space" in line
    polars = RuntimeError("parquet: underlying IO error: Disk quota exceeded (os error 122)")
    assert "Disk quota exceeded" in disk_problem(polars)
    assert disk_problem(RuntimeError("unexpected pos 96192 vs 96080")) is None


WRITE_JOB = """
import sys
import polars as pl
from layerlaws.core.atomic import write_json, write_parquet
from layerlaws.core.logs import run_logged

path, writer, log = sys.argv[1], sys.argv[2], (sys.argv[3:] or [None])[0]
rows = {"value": list(range(20_000))}
if writer == "json":
    run_logged(lambda: write_json(path, rows), log)
else:
    run_logged(lambda: write_parquet(path, pl.DataFrame(rows)), log)
"""


@pytest.mark.parametrize("writer", ["json", "parquet"])
def test_a_full_disk_is_one_line_naming_the_output_and_leaves_nothing(tmp_path, writer):
    """RLIMIT_FSIZE (``ulimit -f``) makes a write fail as on a full disk (EFBIG)."""
    output = tmp_path / "results" / f"table.{writer}"
    job = run_python(WRITE_JOB, str(output), writer, file_size=4096)
    assert job.returncode == 1, job.stderr
    [line] = error_lines(job.stderr)
    assert f"could not write {output}: File too large. Free space on its disk" in line
    assert "Traceback" not in job.stderr
    assert not (tmp_path / "results").exists()  # no partial output, no temporary, no folder


@pytest.mark.parametrize("logged", ["elsewhere", "inside"])
def test_a_read_only_results_folder_is_one_line_naming_it(tmp_path, logged):
    """An output, or first the job's log, in a folder this user may not write."""
    folder = tmp_path / "results"
    folder.mkdir()
    log = (folder if logged == "inside" else tmp_path) / "logs" / "job.log"
    with read_only(folder):
        job = run_python(WRITE_JOB, str(folder / "t.json"), "json", str(log), unprivileged=True)
    assert job.returncode == 1, job.stderr
    [line] = error_lines(job.stderr)
    denied = log.parent if logged == "inside" else folder / "t.json"
    assert f"could not open {denied}: Permission denied" in line
    assert f"make {denied.parent} writable" in line
    assert "Traceback" not in job.stderr
    assert list(folder.iterdir()) == []
    if logged == "elsewhere":
        assert line in log.read_text()


def test_ctrl_c_is_one_line_saying_how_to_go_on(tmp_path):
    """SIGINT (Ctrl-C at the terminal, or Snakemake stopping its jobs) to a running job:
    one line, no traceback, status 130."""
    script = (
        "import sys, time\n"
        "from layerlaws.core.logs import run_logged\n"
        "def step():\n"
        "    print('running', file=sys.stderr, flush=True)\n"
        "    time.sleep(60)\n"
        f"run_logged(step, {str(tmp_path / 'job.log')!r})\n"
    )
    job = subprocess.Popen(
        [sys.executable, "-c", script], stderr=subprocess.PIPE, text=True, cwd=tmp_path
    )
    assert job.stderr.readline().strip().endswith("running")
    job.send_signal(signal.SIGINT)
    _, stderr = job.communicate(timeout=30)
    assert job.returncode == 130
    assert "Traceback" not in stderr and "KeyboardInterrupt" not in stderr
    assert "ERROR layerlaws: interrupted; nothing half-written is kept" in stderr
    assert "Rerun the same command" in (tmp_path / "job.log").read_text()
