"""The torch backend passes ncd-core's conformance suite (every op, lifts, models)."""

import numpy as np

from ncd.testing import BackendConformance


class TestTorchConformance(BackendConformance):
    target = "torch"


class TestTorchConformanceFloat64(BackendConformance):
    target = "torch"
    dtype = np.float64
    rtol = 1e-10
    atol = 1e-10
