"""Issue 15's reductions on OpenCL (PoCL) with non-finite rows at sizes 1, 7, 13 and 301, on the
vector rows and the scalar renderer, fused and one kernel per op, against the reference."""

from __future__ import annotations

import warnings
from collections.abc import Iterator
from typing import Any

import numpy as np
import pytest

import ncd
from ncd import ops

pytest.importorskip("pyopencl")

from ncd_opencl.backend import OpenCLExecutable


@pytest.fixture(params=["vector", "scalar"])
def path(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> Iterator[str]:
    if request.param == "scalar":
        import attrs

        import ncd_opencl.generate as gen

        monkeypatch.setattr(gen, "OPENCL", attrs.evolve(gen.OPENCL, vector_width=0))
    yield request.param


def _rows(n: int) -> np.ndarray:
    """Random, all -inf, a +inf, a NaN, a zero among values near 1 (a product that stays finite)."""
    rng = np.random.default_rng(n)
    x = (0.9 + 0.2 * rng.random((5, n))).astype(np.float32)
    x[0] = rng.standard_normal(n)
    x[1] = -np.inf
    x[2, n // 2] = np.inf
    x[3, n - 1] = np.nan
    x[4, n // 3] = 0.0
    return x


@pytest.mark.parametrize("fuse", [True, False])
@pytest.mark.parametrize("n", (1, 7, 13, 301))
def test_reductions_match_the_reference(n: int, fuse: bool, path: str) -> None:
    r, c = ncd.Axis("r", size=5), ncd.Axis("c", size=n)
    terms = [
        ops.prod(c),
        ops.logsumexp(c),
        ops.var(c, correction=0),
        ops.std(c, correction=0),
        ops.argmax(c),
        ops.argmin(c),
        ops.cumsum(c, "k"),
        ops.cumprod(c),
    ]
    if n > 1:
        terms.append(ops.var(c))

    @ncd.trace(inputs=[ncd.ArrayType((r, c))])
    def fan(x: Any) -> Any:
        return tuple(t(x) for t in terms)

    x = _rows(n)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        want = ncd.run(fan, x)
    options: dict[str, Any] = {} if fuse else {"fuse": False}
    got = OpenCLExecutable(fan, **options)(x)
    for k, (g, w) in enumerate(zip(got, want, strict=True)):
        np.testing.assert_allclose(g, w, rtol=1e-4, atol=1e-5, equal_nan=True, err_msg=str(k))


def test_prod_streamed_along_its_axis() -> None:
    """``exp >> prod`` streams the reduced axis (an accumulator starting at 1, ``*=``)."""
    r, c = ncd.Axis("r", size=3), ncd.Axis("c", size=301)
    model = ncd.identity([r, c]) >> ops.exp() >> ops.prod(c)
    (kernel,) = ncd.fuse(model).kernels
    assert kernel.streamed == (c,) and "prod" in kernel.accumulators().values()
    x = (0.01 * np.random.default_rng(3).standard_normal((3, 301))).astype(np.float32)
    x[0, 5], x[1, 7] = np.nan, -np.inf
    np.testing.assert_allclose(
        OpenCLExecutable(model)(x), ncd.run(model, x), rtol=1e-4, equal_nan=True
    )
