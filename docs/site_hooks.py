"""MkDocs hooks of the docs site (mkdocs.yml): the repository's own pages join the site and
every link keeps pointing where it points on GitHub.

- README.md is the site's home (``index.md``) and CHANGELOG.md its ``changelog.md``, read
  from where they are (not copied into docs/).
- A link is resolved from the repository file its page is (``docs/x.md`` from README.md,
  ``../README.md#your-own-model`` from a page under docs/) and pointed at the site's page
  or image for that file, the docs folder itself at the home page.
- A link to another file of the repository (``../configs/paper.yaml``, a script under docs/
  that is not a page) points at a copy of it under ``repository/``; a link to nothing is
  left alone, for MkDocs to report (a warning, so ``mkdocs build --strict`` fails).
- Headings get GitHub's anchors (``slug``), the ones the pages link to and tests/test_docs.py
  checks.
- ``SchemaFields`` (a Griffe extension, named in mkdocs.yml's mkdocstrings options): each
  field of a stage's settings class gets its key's line of the configuration reference as
  its docstring (its type, default and description, from the config schema).
"""

from __future__ import annotations

import posixpath
import re
import unicodedata
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit, urlunsplit

import griffe
from markdown import Extension, Markdown
from markdown.treeprocessors import Treeprocessor
from mkdocs.config.defaults import MkDocsConfig
from mkdocs.structure.files import File, Files, InclusionLevel
from mkdocs.structure.pages import Page

from layerlaws.core.reference import key_entry
from layerlaws.core.settings import schema_at

ROOT_PAGES = {"README.md": "index.md", "CHANGELOG.md": "changelog.md"}
"""The repository's pages outside docs/ → their place in the site."""

COPIES = "repository"
"""The site's folder of the repository files that pages link to and that are not pages."""

LINK_ATTRIBUTES = {"a": "href", "img": "src"}

SETTINGS_OF = re.compile(r"""settings_of\(["']([\w.*]+)["']\)""")
"""The decorator of a settings class (``layerlaws.core.settings.settings_of``) and its block."""


def slug(heading: str) -> str:
    """GitHub's anchor of a heading: lowercase, punctuation dropped (but ``-`` and ``_``),
    spaces to ``-``."""
    kept = []
    for character in heading.strip().lower():
        if character in "-_ " or unicodedata.category(character)[0] in "LNM":
            kept.append("-" if character == " " else character)
    return "".join(kept)


def _toc_slug(text: str, separator: str) -> str:
    """``slug`` as the toc extension calls it (with its separator, always ``-`` here)."""
    return slug(text)


class RepositoryLinks(Extension):
    """Resolves each link of the page being rendered against the repository (set by
    ``on_page_markdown`` before MkDocs renders it)."""

    def __init__(self) -> None:
        super().__init__()
        self.root = Path()
        self.page: Page | None = None
        self.files = Files([])
        self.config: MkDocsConfig | None = None
        self.site_files: dict[str, File] = {}
        """Repository path (``docs/x.md``, ``README.md``, ``docs``) → the site's file."""

    def extendMarkdown(self, md: Markdown) -> None:
        # After the inline links are made (20), before MkDocs resolves them (relpath, 0).
        md.treeprocessors.register(_LinkRewriter(md, self), "repository_links", 2)

    def repository_path(self, file: File) -> str | None:
        """Where a file of the site lies in the repository; None for the theme's own."""
        if file.abs_src_path is None:
            return None
        path = Path(file.abs_src_path).resolve()
        return path.relative_to(self.root).as_posix() if path.is_relative_to(self.root) else None

    def rewrite(self, url: str) -> str:
        """A link of the page, relative to its file in the repository → relative to its
        place in the site."""
        scheme, netloc, path, query, anchor = urlsplit(url)
        if scheme or netloc or not path or path.startswith("/") or self.page is None:
            return url
        here = self.repository_path(self.page.file)
        target = posixpath.normpath(posixpath.join(posixpath.dirname(here or ""), path))
        site_file = self.site_files.get(target) or self._copy(target)
        if site_file is None:
            return url
        relative = posixpath.relpath(site_file.src_uri, posixpath.dirname(self.page.file.src_uri))
        return urlunsplit(("", "", relative, query, anchor))

    def _copy(self, target: str) -> File | None:
        """The site's copy of a repository file that is not a page of the site (added to
        the site's files on first use), or None where the repository has no such file."""
        source = self.root / target
        if target.startswith("../") or not source.is_file():
            return None
        uri = f"{COPIES}/{target}"
        copy = self.files.get_file_from_path(uri)
        if copy is None:
            copy = File.generated(
                self.config, uri, abs_src_path=str(source), inclusion=InclusionLevel.NOT_IN_NAV
            )
            self.files.append(copy)
        return copy


class _LinkRewriter(Treeprocessor):
    def __init__(self, md: Markdown, links: RepositoryLinks) -> None:
        super().__init__(md)
        self.links = links

    def run(self, root):
        for element in root.iter():
            attribute = LINK_ATTRIBUTES.get(element.tag)
            if attribute and element.get(attribute) is not None:
                element.set(attribute, self.links.rewrite(element.get(attribute)))


LINKS = RepositoryLinks()


def on_config(config: MkDocsConfig) -> MkDocsConfig:
    LINKS.root = Path(config.config_file_path).resolve().parent
    LINKS.config = config
    config.markdown_extensions.append(LINKS)
    config.mdx_configs.setdefault("toc", {})["slugify"] = _toc_slug
    return config


def on_files(files: Files, config: MkDocsConfig) -> Files:
    for repository_path, uri in ROOT_PAGES.items():
        files.append(File.generated(config, uri, abs_src_path=str(LINKS.root / repository_path)))
    LINKS.files = files
    LINKS.site_files = {
        path: file
        for file in files
        if not file.inclusion.is_excluded() and (path := LINKS.repository_path(file)) is not None
    }
    docs = Path(config.docs_dir).resolve().relative_to(LINKS.root).as_posix()
    LINKS.site_files[docs] = files.get_file_from_path("index.md")
    return files


def on_page_markdown(markdown: str, page: Page, config: MkDocsConfig, files: Files) -> str:
    LINKS.page = page
    return markdown


class SchemaFields(griffe.Extension):
    """Each field of a class made by ``settings_of("<block>")`` without a docstring of its
    own gets the configuration reference's line of ``<block>.<field>``."""

    def on_class_members(self, *, cls: griffe.Class, **kwargs: Any) -> None:
        blocks = [SETTINGS_OF.fullmatch(str(decorator.value)) for decorator in cls.decorators]
        block = next((match[1] for match in blocks if match), None)
        if block is None:
            return
        for name, member in cls.members.items():
            if not member.is_attribute or "property" in member.labels:
                continue
            annotation = str(member.annotation or "")
            if annotation and not annotation.startswith("ClassVar"):
                key = f"{block}.{name}"
                text = key_entry(key, schema_at(key), required=False)
                member.docstring = member.docstring or griffe.Docstring(text, parent=member)
