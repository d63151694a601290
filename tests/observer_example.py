"""The worked example of docs/observers.md (a plug-in observer: the mean state norm per
layer), as a user saves it: its code block written to a file of their own."""

from __future__ import annotations

import re
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
PAGE = REPO / "docs" / "observers.md"
EXAMPLE = "observers/mean_norm.py"
"""Where the page says to save it, relative to the config's folder."""


def example_code() -> str:
    """The code block of the page's worked example."""
    section = PAGE.read_text().split("## A worked example", 1)[1]
    return re.search(r"```python\n(.*?)```", section, re.DOTALL).group(1)


def write_example(folder: Path) -> Path:
    """The example saved as ``folder/observers/mean_norm.py``; its path."""
    path = folder / EXAMPLE
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(example_code())
    return path
