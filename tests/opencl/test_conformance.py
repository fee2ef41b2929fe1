"""The OpenCL backend against the reference interpreter: ncd.testing's conformance suite, with
ncd.fuse's plan, the local planner, one kernel per op (unfused), and matmul tiles in
__local memory, and rendered for 8 and for 16 float lanes."""

from __future__ import annotations

from typing import Any, ClassVar

import pytest

from ncd.testing import BackendConformance

pytest.importorskip("pyopencl")


class TestOpenCLConformance(BackendConformance):
    """The default: ncd.fuse's plan, IEEE math (no finite-math-only), the base tolerances."""

    target = "opencl"
    expected_failures: ClassVar[dict[str, str]] = {}


class TestOpenCLUnfused(BackendConformance):
    target = "opencl"
    compile_options: ClassVar[dict[str, Any]] = {"fuse": False, "fast_math": False}


class TestOpenCLLocalPlanner(BackendConformance):
    """The package's fallback planner (``fuse="local"``)."""

    target = "opencl"
    compile_options: ClassVar[dict[str, Any]] = {"fuse": "local"}


class TestOpenCLLocalMemory(BackendConformance):
    """Matmul tiles staged in ``__local`` memory (the GPU default), run on PoCL."""

    target = "opencl"
    compile_options: ClassVar[dict[str, Any]] = {"local_memory": True}


class TestOpenCLEightLanes(BackendConformance):
    """Rendered for 8 float lanes whatever the device (the dot-product matmul block)."""

    target = "opencl"
    compile_options: ClassVar[dict[str, Any]] = {"lanes": 8}


class TestOpenCLSixteenLanes(BackendConformance):
    """Rendered for 16 float lanes whatever the device: float32 weight parameters through the
    panel GEMM (an AVX2 device splits its vectors: slower, the same values)."""

    target = "opencl"
    compile_options: ClassVar[dict[str, Any]] = {"lanes": 16}
