"""bench/mutations.py, the mutation score, run on one fast mutation: its snippets all still
apply to the library, the mutated copy is what the tests import, the mutation is killed and
the library itself is left as it was."""

import re
import subprocess
import sys

from snakemake_runs import REPO

FAST_MUTATION = "r_order_reversed"
"""Killed by one synthetic-task unit test that runs in well under a second."""


def library_files() -> dict[str, bytes]:
    return {
        path.relative_to(REPO).as_posix(): path.read_bytes()
        for path in sorted((REPO / "layerlaws").rglob("*.py"))
    }


def test_one_mutation_is_applied_to_a_copy_and_killed():
    before = library_files()
    result = subprocess.run(
        [sys.executable, "bench/mutations.py", "--only", FAST_MUTATION],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert result.returncode == 0, result.stdout + result.stderr
    lines = result.stdout.strip().splitlines()
    assert re.fullmatch(r"mutations_killed=1/1 seconds=\d+", lines[-1]), result.stdout
    assert any(line.split()[:3] == ["killed", FAST_MUTATION, "unit"] for line in lines)
    assert library_files() == before
