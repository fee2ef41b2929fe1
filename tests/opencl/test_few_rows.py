"""A linear layer over few rows that are no product of whole per-axis tiles (batch 1 x seq 5:
the planner spreads a 12-row group as 3 x 5) builds and matches the reference: the check of
the plan and the renderer take the same default group as the planner (it refused the plan
it had made itself before)."""

from __future__ import annotations

import numpy as np
import pytest

import ncd
from ncd import ops

pytest.importorskip("pyopencl")


@pytest.mark.parametrize("rows", [(2, 5), (1, 5), (1, 13), (2, 3), (3, 7), (1, 1), (7, 1)])
def test_a_linear_over_few_rows_builds_and_matches(rows: tuple[int, int]) -> None:
    b, s = rows
    model = ops.linear("d_model -> d_out", d_model=24, d_out=40).over(
        ncd.Axis("batch", size=b), ncd.Axis("seq", size=s)
    )
    params = ncd.init(model, seed=b * s)
    x = np.random.default_rng(s).standard_normal((b, s, 24)).astype(np.float32)
    got = ncd.compile(model, "opencl")(x, params=params)
    np.testing.assert_allclose(got, ncd.run(model, x, params=params), rtol=1e-5, atol=1e-5)
