"""Bool wires on OpenCL (issue 15): a bool stored by one kernel (one byte per element) and
read by a builtin in the next is converted to the arithmetic type explicitly (``exp`` of a
``uchar`` is ambiguous in OpenCL C: the differential hunt found it), and a bool input feeds a
builtin directly; both match the reference at awkward sizes."""

from __future__ import annotations

import numpy as np
import pytest

import ncd
from ncd import ops

pytest.importorskip("pyopencl")


@pytest.mark.parametrize("n", [1, 7, 13, 301])
def test_a_stored_bool_feeds_a_builtin(n: int) -> None:
    r = ncd.Axis("r", size=n)
    x = np.random.default_rng(n).standard_normal(n).astype(np.float32)
    x[0] = np.nan
    for model, arg in (
        ((ops.lt(0.0) >> ops.exp() >> ops.sin()).over(r), x),
        (ncd.identity(ncd.ArrayType((r,), "bool")) >> ops.exp(), x > 0),
    ):
        got = ncd.compile(model, "opencl")(arg)
        np.testing.assert_allclose(got, ncd.run(model, arg), rtol=1e-6)
