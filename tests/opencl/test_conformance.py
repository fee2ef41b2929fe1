"""The OpenCL backend against the reference interpreter: ncd.testing's conformance suite, with
the local planner (fused) and with one kernel per op (unfused)."""

from __future__ import annotations

from typing import Any, ClassVar

import pytest

from ncd.testing import BackendConformance

pytest.importorskip("pyopencl")


class TestOpenCLConformance(BackendConformance):
    """The default: ncd.fuse's plan, fast math, the base class's tolerances, no exceptions."""

    target = "opencl"
    expected_failures: ClassVar[dict[str, str]] = {}


class TestOpenCLUnfused(BackendConformance):
    target = "opencl"
    compile_options: ClassVar[dict[str, Any]] = {"fuse": False, "fast_math": False}


class TestOpenCLLocalPlanner(BackendConformance):
    """The package's fallback planner (``fuse="local"``)."""

    target = "opencl"
    compile_options: ClassVar[dict[str, Any]] = {"fuse": "local"}
