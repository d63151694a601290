"""The *Stages* table of docs/workflow.md, generated from the stages themselves rather than
typed: one row per stage of ``STAGES`` (``layerlaws/pipeline/stages.py``), in order, with
what its rule file says of it (its opening comment), the rules it declares, the scripts they
run, and the library modules those scripts and the rule file import.

    python docs/stage_table.py            # rewrite the table in docs/workflow.md
    python docs/stage_table.py --check    # exit 1 if the page's table is stale

tests/test_layers.py runs the check.
"""

from __future__ import annotations

import argparse
import os
import re
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PAGE = ROOT / "docs" / "workflow.md"
HEADER = (
    "| stage | rule file | rules | scripts | library modules they import |\n|---|---|---|---|---|\n"
)
RULE = re.compile(r"^rule (\w+):", re.M)
SCRIPT = re.compile(r'script:\s*"\.\./scripts/([\w.]+\.py)"')
LIBRARY_IMPORT = re.compile(r"^\s*(?:from|import) layerlaws\.(\w+)\.(\w+)", re.M)


def opening_comment(text: str) -> str:
    """The first paragraph of comment lines a rule file opens with, as one line."""
    lines = []
    for line in text.splitlines():
        if not line.startswith("#") or line.strip() == "#":
            break
        lines.append(line.lstrip("# ").rstrip())
    return " ".join(lines)


def modules(texts: list[str]) -> str:
    """``package``: ``module``, … of every library module ``texts`` import, packages in order
    of first import."""
    found: dict[str, list[str]] = {}
    for text in texts:
        for package, module in LIBRARY_IMPORT.findall(text):
            if module not in found.setdefault(package, []):
                found[package].append(module)
    return "; ".join(
        f"`{package}`: " + ", ".join(f"`{module}`" for module in names)
        for package, names in found.items()
    )


def table(root: Path = ROOT) -> str:
    """The stage table of the repository at ``root``."""
    sys.path.insert(0, str(root))
    from layerlaws.pipeline.stages import RULE_FILES

    rows = []
    for rule_file in RULE_FILES:
        text = (root / rule_file).read_text()
        scripts = list(dict.fromkeys(SCRIPT.findall(text)))
        sources = [text] + [(root / "scripts" / script).read_text() for script in scripts]
        cells = (
            opening_comment(text),
            f"`{rule_file}`",
            ", ".join(f"`{rule}`" for rule in RULE.findall(text)),
            ", ".join(f"`{script}`" for script in scripts) or "none",
            modules(sources),
        )
        rows.append("| " + " | ".join(cells) + " |\n")
    return HEADER + "".join(rows)


def with_table(page: str, new_table: str) -> str:
    """``page`` with its stage table (from the header row to the last row after it)
    replaced by ``new_table``."""
    start = page.index(HEADER)
    end = start + len(HEADER)
    while page.startswith("| ", end):
        end = page.index("\n", end) + 1
    return page[:start] + new_table + page[end:]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--check", action="store_true", help="only say whether it is stale")
    arguments = parser.parse_args(argv)
    page = PAGE.read_text()
    new = with_table(page, table())
    if arguments.check:
        stale = new != page
        print(f"{PAGE.name}: the stage table is {'stale' if stale else 'up to date'}")
        return 1 if stale else 0
    partial = PAGE.with_name(f".{PAGE.name}.partial")
    partial.write_text(new)
    os.replace(partial, PAGE)
    print(f"{PAGE.name}: the stage table written")
    return 0


if __name__ == "__main__":
    sys.exit(main())
