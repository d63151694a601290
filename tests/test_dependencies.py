"""pyproject.toml states ranges (so that the package installs into an existing environment);
requirements.lock holds the exact versions that `make` installs and CI tests."""

import tomllib
from importlib import metadata

import pytest
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name
from packaging.version import Version
from snakemake_runs import REPO


def declared() -> list[Requirement]:
    """Every requirement of pyproject.toml: the dependencies and the optional extras."""
    project = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]
    lines = project["dependencies"] + [
        line for extra in project["optional-dependencies"].values() for line in extra
    ]
    return [Requirement(line) for line in lines]


def locked(text: str) -> dict[str, str]:
    """The pins of a lock file's text: canonical name → version string."""
    pins = {}
    for line in text.splitlines():
        line = line.split("#", 1)[0].strip()
        if line:
            name, _, version = line.partition("==")
            assert version, f"requirements.lock: {line!r} is not an exact pin"
            pins[canonicalize_name(name)] = version
    return pins


def test_the_lock_pins_every_declared_requirement_within_its_range():
    pins = locked((REPO / "requirements.lock").read_text())
    assert len(pins) > 50, "requirements.lock lost its transitive pins"
    for requirement in declared():
        name = canonicalize_name(requirement.name)
        assert name in pins, f"{requirement.name} is declared but not in requirements.lock"
        assert requirement.specifier.contains(Version(pins[name])), (
            f"requirements.lock pins {name}=={pins[name]}, outside pyproject's {requirement}"
        )


def test_the_lock_names_releases_not_local_builds():
    """torch==2.13.0, not 2.13.0+cpu: the same lock installs the CUDA build on a GPU machine."""
    pins = locked((REPO / "requirements.lock").read_text())
    assert {name: version for name, version in pins.items() if "+" in version} == {}


def test_the_ranges_have_a_tested_lower_bound_and_an_upper_bound():
    """Each range starts at the version CI tests (the lock's) and stops before the next
    release allowed to break the API; only the formatters are pinned exactly."""
    pins = locked((REPO / "requirements.lock").read_text())
    for requirement in declared():
        operators = {spec.operator for spec in requirement.specifier}
        name = canonicalize_name(requirement.name)
        if name in {"ruff", "snakefmt"}:
            assert operators == {"=="}, requirement
        else:
            assert operators == {">=", "<"}, requirement
            lower = next(s.version for s in requirement.specifier if s.operator == ">=")
            assert Version(lower) == Version(pins[name]), (
                f"{requirement}: the lower bound is not the version CI tests ({pins[name]})"
            )


def test_the_running_environment_is_within_the_ranges():
    for requirement in declared():
        try:
            installed = metadata.version(requirement.name)
        except metadata.PackageNotFoundError:
            pytest.fail(f"{requirement.name} is declared but not installed: run make test")
        assert requirement.specifier.contains(Version(installed), prereleases=True), (
            f"{requirement.name} {installed} is outside pyproject's {requirement}"
        )


def test_a_lock_line_without_a_pin_is_refused():
    with pytest.raises(AssertionError, match="not an exact pin"):
        locked("torch>=2.13\n")
    assert locked("# header\nTorch==2.13.0  # via x\n") == {"torch": "2.13.0"}
