"""docs/extending.md stays true: every file it names exists, every stage of the workflow's
stage list has the files its "Adding a stage" recipe asks for, and the names it gives for
the architecture table and the tiny test models are the code's."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

ROOT = Path(__file__).parents[1]
GUIDE = (ROOT / "docs" / "extending.md").read_text()


def named_paths(text: str) -> list[str]:
    """The concrete repository paths in backticks (placeholders like ``<stage>`` left out,
    ``{a,b}`` brace lists expanded)."""
    found = []
    for quoted in re.findall(r"`([^`\s]+)`", text):
        if "<" in quoted or not re.match(r"^(layerlaws|tests|rules|scripts|report|docs)/", quoted):
            continue
        braces = re.search(r"\{([^}]*)\}", quoted)
        if braces:
            found += [quoted.replace(braces.group(0), part) for part in braces.group(1).split(",")]
        else:
            found.append(quoted)
    return found


def test_every_named_path_exists():
    paths = named_paths(GUIDE)
    assert len(paths) > 20
    missing = [path for path in paths if not (ROOT / path).exists()]
    assert missing == []


def test_the_paths_are_found_and_a_missing_one_would_be():
    assert named_paths("`layerlaws/{a,b}.py` and `rules/<stage>.smk`") == [
        "layerlaws/a.py",
        "layerlaws/b.py",
    ]


def stage_names() -> list[str]:
    """The stages with outputs of their own (and so a package of their own)."""
    from layerlaws.pipeline.stages import STAGES, Stage

    return [stage.name for stage in STAGES if stage.outputs is not Stage.outputs]


@pytest.mark.parametrize("stage", stage_names())
def test_every_stage_has_the_recipes_files(stage):
    package = ROOT / "layerlaws" / stage
    for name in ("workflow.py", "plots.py"):
        assert (package / name).exists(), f"layerlaws/{stage}/{name}"
    assert (ROOT / "rules" / f"{stage}.smk").exists()
    assert (ROOT / "tests" / stage).is_dir()


def test_the_names_it_gives_are_the_codes():
    """``ARCHITECTURES``, ``FAMILY_OPTIONS``…: each upper-case name the guide gives is
    defined in the library, the tiny test models or the family test."""
    sources = [
        (ROOT / "tests" / name).read_text()
        for name in ("tiny_models.py", "models/test_families.py")
    ]
    sources += [path.read_text() for path in (ROOT / "layerlaws").rglob("*.py")]
    names = set(re.findall(r"`([A-Z][A-Z0-9_]{4,})`", GUIDE))
    assert {"ARCHITECTURES", "FAMILY_OPTIONS", "STAGES", "METRICS"} <= names
    undefined = [
        name
        for name in sorted(names)
        if not any(re.search(rf"^{name}\b.*=", text, re.M) for text in sources)
    ]
    assert undefined == []
