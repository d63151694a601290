"""Tests that need something of the machine (root, apt-get, dropping capabilities) skip
where it is missing, but under CI=true, where they must run, a skip would hide them: there
the reason fails the test instead."""

from __future__ import annotations

import os

import pytest


def cannot_run(what: str, reason: str) -> None:
    """Skip with ``reason``; under CI=true fail, saying that ``what`` must run there."""
    if os.environ.get("CI") == "true":
        pytest.fail(f"{what} must run under CI=true, but {reason}", pytrace=False)
    pytest.skip(reason)
