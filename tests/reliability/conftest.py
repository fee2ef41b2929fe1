"""The reliability session: regression tests for docs/reliability.md's promises.

Tests that need a backend are marked ``opencl`` or ``torch`` (select or deselect with ``-m``).
"""

from __future__ import annotations

import pytest


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line("markers", "opencl: needs ncd-opencl and an OpenCL device")
    config.addinivalue_line("markers", "torch: needs ncd-torch")
