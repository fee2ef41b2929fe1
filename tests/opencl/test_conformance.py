"""The OpenCL backend against the reference interpreter: ncd.testing's conformance suite, with
the local planner (fused) and with one kernel per op (unfused)."""

from __future__ import annotations

from typing import Any, ClassVar

import pytest

from ncd.testing import BackendConformance

pytest.importorskip("pyopencl")


class TestOpenCLConformance(BackendConformance):
    target = "opencl"
    # fast math (the default) re-associates reductions; float32 rounding stays within this
    rtol = 2e-4
    atol = 2e-5
    expected_failures: ClassVar[dict[str, str]] = {}


class TestOpenCLUnfused(BackendConformance):
    target = "opencl"
    rtol = 2e-4
    atol = 2e-5
    compile_options: ClassVar[dict[str, Any]] = {"fuse": False, "fast_math": False}
