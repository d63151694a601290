"""The docs site (mkdocs.yml, `make docs`) builds in strict mode, so that a broken link, a
missing anchor, a page left out of the nav or a cross-reference to nothing fails the suite;
every API object the pages name has an entry in the site's API reference; every file a page
references is in the site and none is fetched from elsewhere; and the site, opened in a real
browser from disk and through a local server, looks like its theme's pages: styled, its
navigation listing every page, its search finding a page, its images drawn, no horizontal
scroll bar at 1280 px (tests/browser.py)."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from html.parser import HTMLParser
from pathlib import Path
from urllib.parse import urlparse

import pytest
from browser import broken_images, launched, opened, remote, searched, served
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


class _References(HTMLParser):
    """The URLs a page's elements load or link to, with their tag: ``src`` of scripts,
    images and frames, ``href`` of links and anchors."""

    def __init__(self) -> None:
        super().__init__()
        self.urls: list[tuple[str, str]] = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        attribute = {"a": "href", "link": "href"}.get(tag, "src")
        self.urls += [(tag, value) for name, value in attrs if name == attribute and value]


def references(page: Path, site: Path) -> tuple[list[str], list[str]]:
    """(the files of ``site`` that ``page`` references and that are missing, the URLs it
    loads from elsewhere); a path from the root (``/assets/…``, the 404 page's) is of the
    site's root, and an anchor's link to another site is followed by a person, not loaded."""
    parser = _References()
    parser.feed(page.read_text())
    missing, elsewhere = [], []
    for tag, url in parser.urls:
        parsed = urlparse(url)
        if parsed.scheme in ("mailto", "data"):
            continue
        if parsed.scheme or parsed.netloc:
            elsewhere += [] if tag == "a" else [url]
        elif parsed.path:
            folder = site if parsed.path.startswith("/") else page.parent
            missing += [] if (folder / parsed.path.lstrip("/")).exists() else [url]
    return missing, elsewhere


def test_every_file_a_page_references_is_in_the_site_and_nothing_loads_from_elsewhere(site):
    found = {
        page.relative_to(site).as_posix(): references(page, site)
        for page in sorted(site.rglob("*.html"))
    }
    missing = {page: refs[0] for page, refs in found.items() if refs[0]}
    elsewhere = {page: refs[1] for page, refs in found.items() if refs[1]}
    assert len(found) > 20
    assert (missing, elsewhere) == ({}, {})


def test_the_reference_check_finds_a_missing_file_and_a_font_from_elsewhere(tmp_path):
    (tmp_path / "here.css").write_text("")
    page = tmp_path / "page.html"
    page.write_text(
        '<link rel="stylesheet" href="here.css"><link rel="stylesheet" href="gone.css">'
        '<link rel="stylesheet" href="https://fonts.example.org/css">'
        '<a href="https://example.org/paper">a paper</a><img src="figure.png#x">'
        '<script src="/here.css"></script>'
    )
    assert references(page, tmp_path) == (
        ["gone.css", "figure.png#x"],
        ["https://fonts.example.org/css"],
    )


@pytest.fixture(scope="module")
def browser():
    with launched() as chromium:
        yield chromium


def nav_pages(site: Path) -> set[str]:
    """The site's pages a person reaches from the navigation: every built page but 404."""
    return {p.relative_to(site).as_posix() for p in site.rglob("*.html")} - {"404.html"}


@pytest.mark.parametrize("where", ["disk", "server"])
def test_the_site_in_a_browser_is_styled_navigable_and_searchable(site, browser, where):
    with served(site) as base, opened(browser) as (page, requested):
        root = site.as_uri() if where == "disk" else base
        page.goto(f"{root}/index.html")
        header = page.locator("header.md-header")
        assert header.evaluate("e => getComputedStyle(e).position") == "sticky"
        assert header.evaluate("e => getComputedStyle(e).backgroundColor") != "rgba(0, 0, 0, 0)"
        links = page.locator("nav.md-nav--primary a.md-nav__link[href]")
        listed = {
            urlparse(href).path.lstrip("/").removeprefix(site.as_posix().lstrip("/") + "/")
            for href in links.evaluate_all("links => links.map(link => link.href)")
        }
        assert listed == nav_pages(site)
        found = {urlparse(url).path.rsplit("/", 1)[-1] for url in searched(page, "gpus_per_node")}
        assert "configuration.html" in found
        assert remote(requested) == []


def test_every_page_in_a_browser_draws_its_images_and_fits_1280_px(site, browser):
    with opened(browser, width=1280) as (page, requested):
        drawn = {}
        for name in sorted(nav_pages(site)):
            page.goto((site / name).as_uri())
            overflow = page.evaluate(
                "document.documentElement.scrollWidth - document.documentElement.clientWidth"
            )
            drawn[name] = (overflow, broken_images(page))
        page.goto((site / "results.html").as_uri())
        shown = re.findall(r"!\[", (ROOT / "docs" / "results.md").read_text())
        assert page.locator("article img").count() == len(shown) > 0
        page.goto((site / "reference/api.html").as_uri())
        assert page.locator("[id='layerlaws.api.Config'].doc-heading").count() == 1
        assert {name: state for name, state in drawn.items() if state != (0, [])} == {}
        assert remote(requested) == []
