"""The README and the pages under docs/ hold together: every relative link and image points
to a file that exists, every in-page anchor to a heading of its page, the README stays short,
and it links every page."""

from __future__ import annotations

import importlib.util
import re
from pathlib import Path

import pytest

ROOT = Path(__file__).parents[1]
README = ROOT / "README.md"
PAGES = sorted((ROOT / "docs").glob("*.md"))
MAX_README_LINES = 300


FENCE = re.compile(r"^(```|~~~).*?^\1[ \t]*$", re.M | re.S)
INLINE_CODE = re.compile(r"`+[^`\n]*`+")
LINK = re.compile(r"\]\(\s*([^)\s]+)(?:\s+\"[^\"]*\")?\s*\)")
HEADING = re.compile(r"^#{1,6}[ \t]+(.+?)[ \t]*#*[ \t]*$", re.M)


def _prose(text: str) -> str:
    """``text`` without fenced code blocks, HTML comments and inline code spans."""
    text = FENCE.sub("", text)
    text = re.sub(r"<!--.*?-->", "", text, flags=re.S)
    return INLINE_CODE.sub("", text)


# GitHub's anchor of a heading, the one the docs site gives it too (docs/site_hooks.py).
_spec = importlib.util.spec_from_file_location("site_hooks", ROOT / "docs" / "site_hooks.py")
site_hooks = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(site_hooks)
slug = site_hooks.slug


def anchors(text: str) -> set[str]:
    """The anchors of a page's headings; a repeated heading gets ``-1``, ``-2``… as on GitHub."""
    found: set[str] = set()
    seen: dict[str, int] = {}
    for heading in HEADING.findall(FENCE.sub("", text)):
        base = slug(heading.replace("`", ""))
        count = seen.get(base, 0)
        seen[base] = count + 1
        found.add(base if count == 0 else f"{base}-{count}")
    return found


def links(page: Path) -> list[str]:
    """Every link and image target of a page that is not a URL."""
    targets = LINK.findall(_prose(page.read_text()))
    return [target for target in targets if not re.match(r"^[a-z][a-z0-9+.-]*:", target)]


DOCUMENTS = [README, *PAGES]


@pytest.mark.parametrize("page", DOCUMENTS, ids=lambda page: page.relative_to(ROOT).as_posix())
def test_every_relative_link_points_to_a_file_that_exists(page):
    missing = []
    for target in links(page):
        path, _, _ = target.partition("#")
        if not path:
            continue
        resolved = (page.parent / path).resolve()
        if not resolved.exists():
            missing.append(target)
    assert missing == []


@pytest.mark.parametrize("page", DOCUMENTS, ids=lambda page: page.relative_to(ROOT).as_posix())
def test_every_in_page_anchor_is_a_heading_of_the_page(page):
    headings = anchors(page.read_text())
    unresolved = [
        target for target in links(page) if target.startswith("#") and target[1:] not in headings
    ]
    assert unresolved == []


def test_the_readme_is_short():
    lines = README.read_text().count("\n")
    assert lines < MAX_README_LINES, f"README.md has {lines} lines; move detail to docs/"


def test_the_readme_links_every_page():
    linked = {
        (ROOT / target.partition("#")[0]).resolve() for target in links(README) if target[0] != "#"
    }
    assert [page.name for page in PAGES if page.resolve() not in linked] == []


def test_the_checks_find_what_they_look_for():
    assert slug("Running on a SLURM cluster") == "running-on-a-slurm-cluster"
    assert slug("The zoo: the papers' claims") == "the-zoo-the-papers-claims"
    assert slug("`coupling.products` and φ̃") == "couplingproducts-and-φ̃"
    text = "# A\n\n## A\n\n```sh\n# not a heading\n```\n\n[x](b.md#c) ![y](d.png) `[z](e.md)`\n"
    assert anchors(text) == {"a", "a-1"}
    assert LINK.findall(_prose(text)) == ["b.md#c", "d.png"]
