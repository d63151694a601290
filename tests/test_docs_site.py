"""The docs site (mkdocs.yml, `make docs`) builds in strict mode, so that a broken link, a
missing anchor, a page left out of the nav or a cross-reference to nothing fails the suite;
and every API object the pages name has an entry in the site's API reference."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
from mkdocstrings import Inventory

ROOT = Path(__file__).parents[1]
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]

QUALIFIED = re.compile(r"\blayerlaws(?:\.[A-Za-z_]\w*)+")
API = re.compile(r"(?<![\w./])api\.(?!py\b)([A-Za-z_]\w*)")
IMPORT = re.compile(r"^[ \t]*from (layerlaws(?:\.\w+)*) import ([\w, ]+)$", re.M)


def named_objects(text: str) -> set[str]:
    """The API objects a page names, in its prose and its code: dotted names
    (``layerlaws.forward.observers``), the notebook API's (``api.coupling(`` →
    ``layerlaws.api.coupling``) and what code imports (``from layerlaws import api``)."""
    names = set(QUALIFIED.findall(text))
    names |= {f"layerlaws.api.{name}" for name in API.findall(text)}
    for module, imported in IMPORT.findall(text):
        names |= {f"{module}.{name.strip()}" for name in imported.split(",")}
    return names


@pytest.fixture(scope="module")
def site(tmp_path_factory: pytest.TempPathFactory) -> Path:
    folder = tmp_path_factory.mktemp("site")
    build = subprocess.run(
        [sys.executable, "-m", "mkdocs", "build", "--strict", "--site-dir", str(folder)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        env={**os.environ, "NO_MKDOCS_2_WARNING": "1"},
    )
    if build.returncode:
        pytest.fail("\n".join(line for line in build.stderr.splitlines() if "WARNING" in line))
    return folder


def test_the_site_builds_in_strict_mode_with_every_page(site):
    built = {path.relative_to(site).with_suffix("").as_posix() for path in site.rglob("*.html")}
    pages = {"index", "404", "changelog"} | {page.stem for page in PAGES[1:]}
    reference = {f"reference/{page.stem}" for page in (ROOT / "docs" / "reference").glob("*.md")}
    assert built == pages | reference


def test_every_api_object_the_pages_name_has_a_reference_entry(site):
    with (site / "objects.inv").open("rb") as file:
        entries = set(Inventory.parse_sphinx(file))
    named = {page.name: named_objects(page.read_text()) for page in PAGES}
    assert named["development.md"] >= {"layerlaws.api", "layerlaws.api.equilearning_law"}
    missing = {page: sorted(names - entries) for page, names in named.items() if names - entries}
    assert missing == {}


def test_the_name_check_finds_what_it_looks_for():
    text = (
        "`layerlaws.forward.observers`. The pass (`layerlaws.equilearning.equilearning_pass`:\n"
        "layerlaws/api.py and api.py; law = api.equilearning_law(model)\n"
        "```python\nfrom layerlaws import api\nfrom layerlaws.api import Config, coupling\n```\n"
    )
    assert named_objects(text) == {
        "layerlaws.forward.observers",
        "layerlaws.equilearning.equilearning_pass",
        "layerlaws.api",
        "layerlaws.api.equilearning_law",
        "layerlaws.api.Config",
        "layerlaws.api.coupling",
    }
