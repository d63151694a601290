"""The rule: the Snakefile's import graph stays torch-free. Snakemake imports every module
the Snakefile and rules/*.smk import each time it parses the workflow (every dry run, and
once per job on a cluster), so they must not pull in torch (seconds, and gigabytes). So do
the torch-free foundations, every module of ``layerlaws.core`` (torch imported only inside
the functions that need it)."""

import re
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
IMPORT = re.compile(r"^\s*(?:from\s+(layerlaws[\w.]*)\s+import|import\s+(layerlaws[\w.]*))", re.M)


def workflow_imports():
    """Every layerlaws module the Snakefile and the rule files import."""
    sources = [REPO / "Snakefile", *sorted((REPO / "rules").glob("*.smk"))]
    return sorted(
        {
            next(name for name in match.groups() if name)
            for source in sources
            for match in IMPORT.finditer(source.read_text())
        }
    )


def assert_torch_free(modules):
    """Importing ``modules`` in a fresh interpreter loads no torch module."""
    code = "import importlib, sys\n"
    code += "".join(f"importlib.import_module({name!r})\n" for name in modules)
    code += "loaded = sorted(m for m in sys.modules if m == 'torch' or m.startswith('torch.'))\n"
    code += "assert not loaded, loaded\n"
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=REPO)
    assert result.returncode == 0, result.stderr


def test_the_workflow_imports_no_torch():
    modules = workflow_imports()
    assert "layerlaws.pipeline.startup" in modules
    assert_torch_free(modules)


def test_the_core_modules_import_no_torch():
    modules = [
        f"layerlaws.core.{path.stem}" for path in sorted((REPO / "layerlaws" / "core").glob("*.py"))
    ]
    assert "layerlaws.core.progress" in modules
    assert_torch_free(modules)
