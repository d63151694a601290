"""Formatting and lint of the Python code and the Snakemake files, and the report texts' markup,
are part of the tests."""

import io
import subprocess
import sys
from types import SimpleNamespace

import docutils.core
import jinja2
import pytest
from snakemake_runs import REPO

BIN = f"{sys.prefix}/bin"


def run(*command: str) -> subprocess.CompletedProcess:
    return subprocess.run(command, cwd=REPO, capture_output=True, text=True, timeout=300)


def test_ruff_lint_and_format():
    lint = run(f"{BIN}/ruff", "check", ".")
    assert lint.returncode == 0, lint.stdout
    formatting = run(f"{BIN}/ruff", "format", "--check", ".")
    assert formatting.returncode == 0, formatting.stdout


def test_snakefmt():
    result = run(f"{BIN}/snakefmt", "--check", "Snakefile", "rules")
    assert result.returncode == 0, result.stderr


def test_snakemake_lint_finds_nothing_but_the_missing_conda_envs():
    """The workflow's software environment is the project's .venv (pip, the versions of
    requirements.lock), not per-rule conda environments; every other lint must be clean."""
    result = run(sys.executable, "-m", "snakemake", "--lint")
    titles = [line.strip() for line in result.stderr.splitlines() if line.strip().startswith("* ")]
    assert titles, "snakemake --lint printed no lint at all: the check itself is broken"
    assert set(titles) == {"* Specify a conda environment or container for each rule.:"}, (
        result.stderr
    )


class _Wildcards:
    """Any wildcard a report text asks for, valued by its own name."""

    def __getattr__(self, name: str) -> str:
        return name


@pytest.mark.parametrize("caption", sorted((REPO / "report").glob("*.rst")), ids=lambda p: p.name)
def test_report_text_renders_without_errors(caption):
    """Every report text, rendered as Snakemake renders it (Jinja with the job's wildcards,
    then reStructuredText), gives no docutils warning or error (an unescaped ``|x|`` reads
    as a substitution and shows up in the report as an error)."""
    text = jinja2.Template(caption.read_text()).render(
        snakemake=SimpleNamespace(wildcards=_Wildcards())
    )
    warnings = io.StringIO()
    docutils.core.publish_doctree(
        text, settings_overrides={"report_level": 2, "halt_level": 5, "warning_stream": warnings}
    )
    assert warnings.getvalue() == ""
