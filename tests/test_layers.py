"""The library's packages and their import layers, as docs/development.md states them: every
``layerlaws.<package>`` import (inside functions too) goes to a lower layer, and its package
tree lists exactly the packages and top-level modules of ``layerlaws/``; and the stage table
of docs/workflow.md names rule files, rules, scripts and modules that exist."""

from __future__ import annotations

import ast
import importlib.util
import re
from pathlib import Path

import pytest

ROOT = Path(__file__).parents[1]
LIBRARY = ROOT / "layerlaws"
DEVELOPMENT = ROOT / "docs" / "development.md"
WORKFLOW = ROOT / "docs" / "workflow.md"


def _section(page: Path, heading: str) -> str:
    """The section ``## heading`` of a docs page, up to the next ``## ``."""
    text = page.read_text()
    start = text.index(f"\n## {heading}\n")
    end = text.find("\n## ", start + 1)
    return text[start : end if end > 0 else None]


def documented_tree() -> list[str]:
    """The entries of the package tree under ``layerlaws/`` (``core/``, ``api/``…)."""
    block = re.search(r"```text\nlayerlaws/\n(.*?)```", _section(DEVELOPMENT, "The library"), re.S)
    assert block, "docs/development.md: no ```text block starting with layerlaws/ in *The library*"
    return [line.split()[0] for line in block.group(1).splitlines() if line.strip()]


def documented_layers() -> list[list[str]]:
    """The import layers, top to bottom: a numbered list of `package` names."""
    layers = re.findall(r"^\d+\. (`\w+`(?:, `\w+`)*)$", _section(DEVELOPMENT, "The library"), re.M)
    assert layers, "docs/development.md: no numbered list of import layers in *The library*"
    return [re.findall(r"`(\w+)`", layer) for layer in layers]


def unit_of(module: str) -> str | None:
    """The package (or top-level module) of a dotted ``layerlaws`` module name; None for
    the root package ``layerlaws`` itself."""
    parts = module.split(".")
    return parts[1] if parts[0] == "layerlaws" and len(parts) > 1 else None


def imported_modules(tree: ast.AST) -> list[tuple[str, int]]:
    """Every absolute ``layerlaws`` module a module imports, with its line (relative
    imports resolved against nothing: the library uses none, and one fails here)."""
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found += [(alias.name, node.lineno) for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            assert node.level == 0, f"relative import at line {node.lineno}"
            if node.module == "layerlaws":
                found += [(f"layerlaws.{alias.name}", node.lineno) for alias in node.names]
            elif node.module:
                found.append((node.module, node.lineno))
    return [(name, line) for name, line in found if name.split(".")[0] == "layerlaws"]


def upward_imports(library: Path, layers: list[list[str]]) -> list[str]:
    """``file:line: a -> b`` for every import of a package of the same or a higher layer."""
    rank = {unit: -index for index, layer in enumerate(layers) for unit in layer}
    found = []
    for path in sorted(library.rglob("*.py")):
        source = unit_of(".".join(path.relative_to(library.parent).with_suffix("").parts))
        if source is None:
            continue
        for module, line in imported_modules(ast.parse(path.read_text(), str(path))):
            target = unit_of(module)
            if target is None or target == source:
                continue
            assert target in rank, f"{path}:{line}: {module} is in no import layer"
            if rank[target] >= rank[source]:
                found.append(f"{path.relative_to(library.parent)}:{line}: {source} -> {target}")
    return found


def library_units(library: Path) -> set[str]:
    packages = {f"{path.parent.name}/" for path in library.glob("*/__init__.py")}
    modules = {path.name for path in library.glob("*.py") if path.name != "__init__.py"}
    return packages | modules


def test_no_package_imports_a_package_of_its_own_or_a_higher_layer():
    assert upward_imports(LIBRARY, documented_layers()) == []


def test_the_documented_tree_lists_exactly_the_library_packages():
    listed = documented_tree()
    assert len(listed) == len(set(listed)), "a package listed twice"
    assert set(listed) == library_units(LIBRARY)


def test_every_package_is_in_exactly_one_layer():
    units = [unit for layer in documented_layers() for unit in layer]
    assert len(units) == len(set(units))
    assert {f"{unit}/" if (LIBRARY / unit).is_dir() else f"{unit}.py" for unit in units} == (
        library_units(LIBRARY)
    )


def _write(folder: Path, files: dict[str, str]) -> Path:
    for name, text in files.items():
        (folder / name).parent.mkdir(parents=True, exist_ok=True)
        (folder / name).write_text(text)
    return folder


@pytest.mark.parametrize(
    ("text", "offending"),
    [
        ("from layerlaws.top.a import x\n", True),
        ("import layerlaws.top.a\n", True),
        ("from layerlaws import top\n", True),
        ("def f():\n    from layerlaws.top import a\n", True),
        ("from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    import layerlaws.top\n", True),
        ("from layerlaws.peer.b import y\n", True),
        ("from layerlaws.low.c import z\nimport numpy\n", False),
        ("from layerlaws.middle.d import w\n", False),
    ],
)
def test_the_check_finds_upward_and_sideways_imports(tmp_path, text, offending):
    """The check itself, on a made-up library: ``middle`` may import only ``low``."""
    library = _write(
        tmp_path / "layerlaws",
        {
            "__init__.py": "",
            "top/__init__.py": "",
            "peer/__init__.py": "",
            "low/__init__.py": "",
            "middle/__init__.py": "",
            "middle/d.py": text,
        },
    )
    found = upward_imports(library, [["top"], ["middle", "peer"], ["low"]])
    assert bool(found) is offending
    assert all(item.startswith("layerlaws/middle/d.py:") for item in found)


def stage_rows() -> list[list[str]]:
    """The cells of the stage table (rule file, rules, scripts, package: modules)."""
    rows = [
        [cell.strip() for cell in line.strip("|").split("|")]
        for line in _section(WORKFLOW, "Stages").splitlines()
        if line.startswith("| ") and not line.startswith("| stage ")
    ]
    assert rows, "docs/workflow.md: no stage table in *Stages*"
    return rows


def test_the_stage_table_names_rule_files_rules_scripts_and_modules_that_exist():
    for _stage, rule_file, rules, scripts, modules in stage_rows():
        rule_path = ROOT / rule_file.strip("`")
        assert rule_path.is_file(), rule_file
        declared = set(re.findall(r"^rule (\w+):", rule_path.read_text(), re.M))
        for rule in re.findall(r"`(\w+)`", rules):
            assert rule in declared, f"{rule} is not a rule of {rule_file}"
        for script in re.findall(r"`([\w.]+\.py)`", scripts):
            assert (ROOT / "scripts" / script).is_file(), script
        for package, names in re.findall(r"`(\w+)`: ((?:`\w+`(?: \([^)]*\))?,? ?)+)", modules):
            for module in re.findall(r"`(\w+)`", names):
                assert (LIBRARY / package / f"{module}.py").is_file(), f"{package}.{module}"


def test_the_stage_table_is_generated_from_the_stages():
    """docs/workflow.md's *Stages* table is what docs/stage_table.py makes of ``STAGES``,
    their rule files and their scripts (`python docs/stage_table.py` rewrites it)."""
    spec = importlib.util.spec_from_file_location("stage_table", ROOT / "docs" / "stage_table.py")
    stage_table = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(stage_table)
    assert stage_table.main(["--check"]) == 0


def test_every_rule_file_is_a_stage_of_the_table():
    listed = {row[1].strip("`") for row in stage_rows()}
    present = {f"rules/{path.name}" for path in (ROOT / "rules").glob("*.smk")}
    assert present - {"rules/common.smk"} == listed
