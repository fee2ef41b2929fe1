"""The torch backend passes ncd-core's conformance suite (every op, lifts, models), in float32
and float64, with and without definition rules. No case is an expected failure."""

from typing import Any, ClassVar

import numpy as np

from ncd.testing import BackendConformance


class TestTorchConformance(BackendConformance):
    target = "torch"


class TestTorchConformanceFloat64(BackendConformance):
    target = "torch"
    dtype = np.float64
    rtol = 1e-10
    atol = 1e-10


class TestTorchConformanceUnfused(BackendConformance):
    """Every block op by op: no definition rule (attention -> scaled_dot_product_attention)."""

    target = "torch"
    compile_options: ClassVar[dict[str, Any]] = {"fuse": False}
