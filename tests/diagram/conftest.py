"""Fixtures for the ncd-diagram tests."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
from diagram_helpers import ARTIFACTS


@pytest.fixture(scope="session")
def artifacts() -> Path:
    """``artifacts/diagrams/`` (gitignored): PNGs written for people to look at."""
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    return ARTIFACTS


@pytest.fixture
def no_dot(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """A PATH without Graphviz's ``dot`` (the real situation on a machine without it)."""
    monkeypatch.setenv("PATH", str(tmp_path))
    assert shutil.which("dot") is None
