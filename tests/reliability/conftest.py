"""The reliability session: regression tests for docs/reliability.md's promises.

Tests that need a backend are marked ``opencl`` or ``torch`` (select or deselect with ``-m``).
"""

from __future__ import annotations

import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from plugin_fakes import Fakes

from ncd.plugins import reset


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line("markers", "opencl: needs ncd-opencl and an OpenCL device")
    config.addinivalue_line("markers", "torch: needs ncd-torch")


@pytest.fixture
def fakes(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Fakes]:
    """A folder on ``sys.path`` for fake plugin distributions, and a registry reset around it."""
    monkeypatch.delenv("NCD_PLUGIN_PREFER", raising=False)
    monkeypatch.delenv("NCD_DISABLE_PLUGINS", raising=False)
    f = Fakes(tmp_path)
    sys.path.insert(0, str(tmp_path))
    reset()
    try:
        yield f
    finally:
        sys.path.remove(str(tmp_path))
        for m in f.modules:
            sys.modules.pop(m, None)
        reset()
