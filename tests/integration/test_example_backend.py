"""The example third-party backend (examples/ncd-example-backend) passes the conformance suite."""

import pytest

import ncd
from ncd.testing import BackendConformance

pytest.importorskip("ncd_example_backend")


class TestExampleBackendConformance(BackendConformance):
    target = "pysource"


def test_source_is_straight_line_numpy():
    exe = ncd.compile(ncd.nn.attention().bind(q=2, x=3, d=4, v=5), "pysource")
    import numpy as np

    exe(np.ones((2, 4)), np.ones((3, 4)), np.ones((3, 5)))
    assert "np.einsum" in exe.source and "def forward" in exe.source
