"""Issue 10, finding 2: an op whose template repeats an axis between input and output
(``linear("d -> d")``: the weight is ``(d, d)``, the contracted and the output index of ``d``
differ) and every rename (views, transposes, einsum permutations) must match the reference in
every OpenCL generator path: ncd.fuse's plan, the local planner, one kernel per op, the tiled
matmul with cache blocking or ``__local`` tiles, the pointwise renderer, scalar and vector
rows."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np
import pytest

import ncd
from ncd import ops
from ncd.axis import ArrayType, Axis
from ncd.codegen.dialect import Dialect
from ncd.codegen.layout import Buffer
from ncd.codegen.render import render_expr
from ncd.errors import ScheduleError

pytest.importorskip("pyopencl")

from ncd_opencl.backend import OpenCLExecutable
from ncd_opencl.generate import generate

pytestmark = pytest.mark.opencl

#: compile options covering each generator path (``scalar`` turns the vector rows off)
PATHS: dict[str, dict[str, Any]] = {
    "default": {},
    "unfused": {"fuse": False},
    "local_planner": {"fuse": "local"},
    "pointwise": {"tiled": False},
    "local_memory": {"local_memory": True},
    "scalar": {"scalar": True},
}


def _ax(name: str, size: int) -> Axis:
    return Axis(name, size=size)


def _residual_linear(d: int, b: int) -> ncd.Term:
    lin = ops.linear("d -> d", d=d)

    @ncd.trace(inputs=[ArrayType((_ax("b", b), lin.graph.nodes[0].op.in_axes[0]))])
    def f(x: Any) -> Any:
        return x + lin(x)

    return f


MODELS: dict[str, Callable[[], ncd.Term]] = {
    # the finding itself, at awkward sizes and at sizes the tiled template takes (K % 8 == 0)
    "linear_dd_7x13": lambda: ops.linear("d -> d").over(_ax("b", 7)).bind(d=13),
    "linear_dd_13x16": lambda: ops.linear("d -> d").over(_ax("b", 13)).bind(d=16),
    "linear_dd_1x8": lambda: ops.linear("d -> d").over(_ax("b", 1)).bind(d=8),
    "linear_dd_nobias": lambda: ops.linear("d -> d", bias=False).over(_ax("b", 7)).bind(d=16),
    "linear_dd_two_lifts": lambda: ops.linear("d -> d").over(_ax("h", 3), _ax("b", 5)).bind(d=8),
    "linear_ad_d": lambda: ops.linear("a d -> d").over(_ax("b", 7)).bind(a=3, d=8),
    "linear_d_de": lambda: ops.linear("d -> d e").over(_ax("b", 7)).bind(d=8, e=3),
    "linear_ab_bc": lambda: ops.linear("a b -> b c").over(_ax("s", 5)).bind(a=3, b=8, c=2),
    "linear_dd_gelu": lambda: (
        (ops.linear("d -> d") >> ops.unary("gelu")).over(_ax("b", 7)).bind(d=16)
    ),
    "linear_dd_chain": lambda: (
        (ops.linear("d -> d") >> ops.linear("d -> d")).over(_ax("b", 7)).bind(d=8)
    ),
    "linear_dd_softmax": lambda: (
        (ops.linear("d -> d") >> ops.softmax("d")).over(_ax("b", 7)).bind(d=16)
    ),
    "layernorm_linear_dd": lambda: (
        (ops.layernorm("d") >> ops.linear("d -> d")).over(_ax("b", 13)).bind(d=16)
    ),
    "residual_linear_dd": lambda: _residual_linear(16, 7),
    # renames
    "einsum_transpose": lambda: ops.einsum("i j -> j i", i=7, j=13),
    "einsum_at_b": lambda: ops.einsum("a b, a c -> b c", a=7, b=13, c=5),
    "einsum_transpose_softmax": lambda: ops.einsum("i j -> j i", i=7, j=16) >> ops.softmax("i"),
    "rearrange_permute": lambda: ops.rearrange("a b -> b a", a=7, b=13),
    "rearrange_merge_permute": lambda: ops.rearrange("a b c -> (c a) b", a=3, b=7, c=5),
    "rearrange_split": lambda: ops.rearrange("s (h e) -> h s e", s=7, h=3, e=5),
    "rename_softmax": lambda: (ops.rename(_ax("s", 13), "t") >> ops.softmax("t")).over(_ax("r", 7)),
    "rename_linear": lambda: (ops.rename(_ax("s", 16), "t") >> ops.linear("t -> t")).over(
        _ax("r", 7)
    ),
    "permute_linear": lambda: ops.rearrange("a b -> b a", a=16, b=7) >> ops.linear("a -> a"),
}

INT_MODELS: set[str] = set()


def _compile(model: ncd.Term, path: str, monkeypatch: pytest.MonkeyPatch) -> Any:
    opts = dict(PATHS[path])
    if opts.pop("scalar", False):
        import attrs

        import ncd_opencl.generate as gen

        monkeypatch.setattr(gen, "OPENCL", attrs.evolve(gen.OPENCL, vector_width=0))
    return OpenCLExecutable(model, **opts)


def _inputs(model: ncd.Term, name: str) -> list[np.ndarray]:
    rng = np.random.default_rng(len(name))
    g = model.graph
    if name in INT_MODELS:
        size = g.nodes[0].op.params()[0].axes[0].size
        return [rng.integers(0, size, g.shape(v)).astype(np.int64) for v in g.inputs]
    return [rng.standard_normal(g.shape(v)).astype(np.float32) for v in g.inputs]


#: models run on every path; the others on the three that differ most (cold builds cost time)
EVERY_PATH = {"linear_dd_7x13", "linear_dd_13x16", "linear_ab_bc", "residual_linear_dd"}
SOME_PATHS = ("default", "scalar")
CASES = [
    (name, path) for name in MODELS for path in PATHS if name in EVERY_PATH or path in SOME_PATHS
]


@pytest.mark.parametrize(("name", "path"), CASES)
def test_matches_reference(name: str, path: str, monkeypatch: pytest.MonkeyPatch) -> None:
    model = MODELS[name]()
    params = ncd.init(model, seed=3)
    xs = _inputs(model, name)
    want = ncd.run(model, *xs, params=params)
    got = _compile(model, path, monkeypatch)(*xs, params=params)
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-5, err_msg=f"{name} [{path}]")


def test_linear_dd_weight_is_read_whole() -> None:
    """The generated source reads ``w[o * D + k]`` (two indices), never ``w[k * D + k]``."""
    src = generate(MODELS["linear_dd_7x13"]().graph).source
    lines = [ln for ln in src.splitlines() if "w_linear_weight[" in ln]
    assert lines
    for ln in lines:
        idx = ln.split("w_linear_weight[", 1)[1].split("]", 1)[0]
        first, _, second = idx.partition(" * 13 + ")
        assert first != second, ln


def test_buffer_with_repeated_axis_refuses_axis_addressing() -> None:
    """A table whose axes repeat cannot be addressed by axis (the diagonal bug); only by
    position."""
    d = _ax("d", 4)
    b = Buffer("w", (d, d), (4, 1))
    with pytest.raises(ScheduleError, match="repeats an axis"):
        b.address({d: "i"})
    assert render_expr(b.address_at(["i", "k"]), Dialect(name="c-like")) == "i * 4 + k"
