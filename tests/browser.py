"""Pages opened as a person opens them: the system's Chromium, driven headless by Playwright
(the pip package; its own browser downloads are not used), for the docs site and the
Snakemake report.

``make test`` installs Debian's ``chromium`` where the machine has none; elsewhere set
``LAYERLAWS_CHROMIUM`` to a Chromium or Chrome executable. A missing browser fails the test
that needs it, saying so: it is never skipped.
"""

from __future__ import annotations

import functools
import http.server
import os
import re
import shutil
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from urllib.parse import urlparse

import pytest
from playwright.sync_api import Browser, Page, sync_playwright

EXECUTABLES = ("chromium", "chromium-browser", "google-chrome")
LOCAL_SCHEMES = {"file", "data", "blob", "about"}
"""Schemes of requests that stay on the machine (besides http to 127.0.0.1)."""


def chromium() -> str:
    """The Chromium executable: ``LAYERLAWS_CHROMIUM``, else the first of ``EXECUTABLES`` on
    the PATH; fails the test with what to install when there is none."""
    found = os.environ.get("LAYERLAWS_CHROMIUM") or next(
        filter(None, map(shutil.which, EXECUTABLES)), None
    )
    if not found:
        pytest.fail(
            "no Chromium to open the pages in: `make test` installs Debian's "
            "(apt-get install chromium); or set LAYERLAWS_CHROMIUM to a Chromium executable"
        )
    return found


@contextmanager
def launched() -> Iterator[Browser]:
    """A headless Chromium (no sandbox: the suite may run as root in a container)."""
    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=chromium(), args=["--no-sandbox"])
        try:
            yield browser
        finally:
            browser.close()


@contextmanager
def opened(
    browser: Browser, width: int = 1280, height: int = 800
) -> Iterator[tuple[Page, list[str]]]:
    """A page of ``width`` × ``height`` CSS pixels, and the list of every URL it asks for
    (in order, filled as it loads)."""
    context = browser.new_context(viewport={"width": width, "height": height})
    requested: list[str] = []
    context.on("request", lambda request: requested.append(request.url))
    try:
        yield context.new_page(), requested
    finally:
        context.close()


def remote(urls: list[str]) -> list[str]:
    """The URLs that leave the machine."""
    return [
        url
        for url in urls
        if urlparse(url).scheme not in LOCAL_SCHEMES
        and urlparse(url).hostname not in ("127.0.0.1", "localhost")
    ]


@contextmanager
def served(folder: Path) -> Iterator[str]:
    """``folder`` served over HTTP on 127.0.0.1 (a free port) while the block runs; its
    base URL."""
    handler = functools.partial(_QuietHandler, directory=str(folder))
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_port}"
    finally:
        server.shutdown()
        server.server_close()


class _QuietHandler(http.server.SimpleHTTPRequestHandler):
    def log_message(self, format: str, *args: object) -> None:
        pass


def broken_images(page: Page) -> list[str]:
    """The page's images that did not load (no pixels), by source; every image is waited for."""
    return page.evaluate(
        """async () => {
            const images = [...document.images];
            await Promise.all(images.map(image => image.decode().catch(() => null)));
            return images.filter(image => !image.complete || image.naturalWidth === 0)
                         .map(image => image.getAttribute('src'));
        }"""
    )


GENERAL = {"Workflow", "Statistics", "About"}
"""The report's menu entries that are not result categories."""


def report_figures(browser: Browser, report: Path) -> dict[str, tuple[str, int, int] | None]:
    """Each result category a Snakemake report lists → the first figure (SVG or PNG) of its
    first subcategory, opened as a person opens it (the category, the subcategory, the
    figure's eye): (its file, its drawn width and height in pixels); None where the category
    shows no figure or it is not drawn."""
    shown: dict[str, tuple[str, int, int] | None] = {}
    with opened(browser) as (page, _):
        page.goto(report.as_uri())
        menu = page.locator("a.block > span")
        for category in [name for name in menu.all_inner_texts() if name not in GENERAL]:
            page.goto(report.as_uri())
            menu.get_by_text(category, exact=True).click()
            eyes = page.locator("tr:has(a[iconname=eye])")
            if eyes.count() == 0:
                menu.first.click()
            figure = eyes.filter(has_text=re.compile(r"\.(svg|png)\s*$"))
            if figure.count() == 0:
                shown[category] = None
                continue
            path = figure.first.locator("td").first.inner_text().strip()
            figure.first.locator("a[iconname=eye]").click()
            image = page.locator(f"img[src*='filename={Path(path).name};']")
            image.wait_for(timeout=10_000)
            size = image.evaluate("i => i.decode().then(() => [i.naturalWidth, i.naturalHeight])")
            shown[category] = (path, *size) if min(size) > 0 else None
    return shown


def searched(page: Page, query: str, timeout_ms: int = 60_000) -> list[str]:
    """The links a Material docs page's search lists for ``query`` (typed into its box). The
    index loads in a worker: from a server at once, with the page, and a query typed before
    it is ready can be lost (the box then says "Type to start searching"); from the disk
    only once something is typed. So the query is typed, the index waited for, and the
    query typed again if it was lost."""
    box, meta = page.locator("input.md-search__input"), page.locator(".md-search-result__meta")
    results = page.locator("a.md-search-result__link")
    box.fill(query)
    page.wait_for_function(
        "!document.querySelector('.md-search-result__meta').innerText.includes('Initializing')",
        timeout=timeout_ms,
    )
    if results.count() == 0 and "matching" not in meta.inner_text():
        box.fill("")
        box.fill(query)
    results.first.wait_for(timeout=timeout_ms)
    return results.evaluate_all("links => links.map(link => link.href)")
