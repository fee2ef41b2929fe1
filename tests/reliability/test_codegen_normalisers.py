"""Issue 10, finding 7: two normalisers over one axis (every ordered pair of softmax,
layernorm, rmsnorm, l2norm) share a kernel in the default plan; the second one's statistics
loop reads the first one's output, whose statistics must be hoisted *before* that loop
(``Writer.at_depth``). Each pair is checked at sizes 1, 7, 13 and 301 (one model holding the
four sizes side by side), on the vector and the scalar path and with the local planner."""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
import pytest

import ncd
from ncd import ops
from ncd.axis import Axis

pytest.importorskip("pyopencl")

from ncd_opencl.backend import OpenCLExecutable

pytestmark = pytest.mark.opencl

NORMS: dict[str, Callable[[Axis], ncd.Term]] = {
    "softmax": lambda x: ops.softmax(x),
    "layernorm": lambda x: ops.layernorm(x),
    "rmsnorm": lambda x: ops.rmsnorm(x),
    "l2norm": lambda x: ops.l2norm(x),
}
SIZES = (1, 7, 13, 301)
#: the vector rows (default) and the scalar renderer; the local planner and ``fuse=False`` put
#: each normaliser in its own kernel, which never built wrongly
PATHS = ("default", "scalar")


def _pairs(first: str) -> tuple[ncd.Term, list[tuple[str, int]]]:
    """``first >> second`` over one axis for every ``second``, at each size in ``SIZES``, side
    by side in one model (one program build for sixteen kernels)."""
    branches, labels = [], []
    for second in NORMS:
        for n in SIZES:
            x = Axis("x", size=n)
            branches.append(
                (
                    NORMS[first](x).named(f"a{len(labels)}")
                    >> NORMS[second](x).named(f"b{len(labels)}")
                ).over(Axis("r", size=3))
            )
            labels.append((second, n))
    model = branches[0]
    for b in branches[1:]:
        model = model @ b
    return model, labels


@pytest.mark.parametrize("path", PATHS)
@pytest.mark.parametrize("first", list(NORMS))
def test_two_normalisers_match_reference(
    first: str, path: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    model, labels = _pairs(first)
    params = ncd.init(model, seed=2)
    rng = np.random.default_rng(7)
    xs = [
        rng.standard_normal(model.graph.shape(v)).astype(np.float32) * 3 for v in model.graph.inputs
    ]
    want = ncd.run(model, *xs, params=params)
    if path == "scalar":
        import attrs

        import ncd_opencl.generate as gen

        monkeypatch.setattr(gen, "OPENCL", attrs.evolve(gen.OPENCL, vector_width=0))
    got = OpenCLExecutable(model)(*xs, params=params)
    assert len(got) == len(labels)
    for (second, n), g, w in zip(labels, got, want, strict=True):
        np.testing.assert_allclose(
            g, w, rtol=1e-4, atol=2e-5, err_msg=f"{first} >> {second} over x={n} [{path}]"
        )


def test_pair_shares_one_kernel() -> None:
    """The default plan keeps both normalisers in one kernel (the case that failed to build)."""
    x = Axis("x", size=13)
    plan = ncd.fuse((ops.layernorm(x) >> ops.rmsnorm(x)).over(Axis("r", size=3)))
    assert len(plan.kernels) == 1
