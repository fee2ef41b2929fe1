"""Issue 10, findings 1 and 10 (code generation): kernels index with 64-bit integers where an
array passes 2^31 - 1 elements (``int`` would wrap silently), every gather clamps its index
into the table (the host refuses bad ids first; the kernel never reads outside the table
whatever it is given), and names that are predefined in OpenCL C (macros, builtins, types,
keywords) cannot collide with generated identifiers."""

from __future__ import annotations

import re
from typing import ClassVar

import attrs
import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import ncd
from ncd import nn, ops
from ncd.axis import Axis
from ncd.codegen import CODEGEN_RULES
from ncd.op import Op, Signature

pytest.importorskip("pyopencl")

import ncd.codegen.lower as lower
from ncd_opencl.backend import OpenCLExecutable
from ncd_opencl.generate import generate

pytestmark = pytest.mark.opencl

BIG = 2**31 + 5  # elements past int's range


def _ax(name: str, size: int) -> Axis:
    return Axis(name, size=size)


def _kernels(source: str) -> list[str]:
    return source.split("__kernel void ")[1:]


WIDE_MODELS = {
    # a vector elementwise kernel, a softmax row kernel, the tiled matmul, a gather
    "exp": lambda: ops.unary("exp").over(_ax("a", 65536), _ax("b", 32769)),
    "softmax": lambda: ops.softmax(_ax("x", 32776)).over(_ax("r", 65536)),
    "linear": lambda: ops.linear("d -> e").over(_ax("s", 4)).bind(d=65536, e=32769),
    "embedding": lambda: ops.embedding("vocab -> d", vocab=2**21 + 1, d=1024).over(_ax("s", 7)),
    "attention": lambda: nn.attention().over("h").bind(h=2**15, q=256, x=256, d=8, v=8),
}


@pytest.mark.parametrize("name", list(WIDE_MODELS))
def test_kernels_over_huge_arrays_index_with_long(name: str) -> None:
    """The source of a bound model with a > 2^31-element array (not allocated: exported)."""
    source = ncd.export(WIDE_MODELS[name](), "opencl")
    for text in _kernels(source):
        assert "(long)get_global_id(" in text, text[:400]
        assert not re.search(r"\bint i_|\bconst int (gid|nb|mb|m\d|n\d)\b", text), text[:800]


def test_small_kernels_keep_int_indices() -> None:
    source = ncd.export(ops.softmax(_ax("x", 13)).over(_ax("r", 7)), "opencl")
    assert "(int)get_global_id(0)" in source and "long" not in source.split("__kernel")[1]


@pytest.mark.parametrize("name", ["exp", "softmax", "linear", "embedding", "attention"])
def test_long_indices_compute_the_same(name: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """The 64-bit paths built and run (forced on at small sizes) match the reference."""
    monkeypatch.setattr(lower, "INT_MAX", 16)
    small = {
        "exp": lambda: ops.unary("exp").over(_ax("a", 7), _ax("b", 16)),
        "softmax": lambda: ops.softmax(_ax("x", 13)).over(_ax("r", 7)),
        "linear": lambda: ops.linear("d -> e").over(_ax("s", 13)).bind(d=16, e=7),
        "embedding": lambda: ops.embedding("vocab -> d", vocab=11, d=7).over(_ax("s", 13)),
        "attention": lambda: nn.attention(causal=True).over("h").bind(h=2, q=13, x=13, d=8, v=8),
    }[name]()
    assert "(long)get_global_id(" in ncd.export(small, "opencl")
    g = small.graph
    rng = np.random.default_rng(0)
    xs = [
        rng.integers(0, 11, g.shape(v))
        if g.values[v].dtype == "int64"
        else rng.standard_normal(g.shape(v)).astype(np.float32)
        for v in g.inputs
    ]
    params = ncd.init(small, seed=0)
    np.testing.assert_allclose(
        OpenCLExecutable(small)(*xs, params=params),
        ncd.run(small, *xs, params=params),
        rtol=1e-4,
        atol=1e-5,
    )


def test_embedding_kernel_clamps_ids_into_the_table() -> None:
    """Past the host check (called directly on the build), ids -1, vocab, 10^6 and 2^40 read
    rows 0 and vocab-1 of the table: no stray memory, no crash."""
    model = ops.embedding("vocab -> d", vocab=11, d=7).over(_ax("s", 6))
    params = ncd.init(model, seed=0)
    ids = np.array([-1, 11, 10**6, 2**40, -(2**40), 3], np.int64)
    build = OpenCLExecutable(model).compiled(model.graph)
    (got,) = build.run([ids], params)
    table = params[next(iter(params))]
    np.testing.assert_array_equal(got, table[np.clip(ids, 0, 10)])


#: names predefined in OpenCL C (macros, builtin functions, vector types, keywords) and in C
HOSTILE = [
    "CL_VERSION_1_",
    "CL_VERSION_1_0",
    "FP_ILOGB0",
    "FP_ILOGB",
    "M_PI",
    "M_PI_F",
    "INFINITY",
    "NAN",
    "MAXFLOAT",
    "HUGE_VALF",
    "FLT_MAX",
    "CHAR_BIT",
    "__OPENCL_VERSION__",
    "__kernel",
    "__global",
    "get_global_id",
    "get_local_size",
    "barrier",
    "float8",
    "float",
    "int",
    "long",
    "half",
    "kernel",
    "global",
    "local",
    "constant",
    "private",
    "exp",
    "dot",
    "min",
    "max",
    "clamp",
    "select",
    "mad",
    "vload8",
    "ncd_erf",
    "NCD_FMAX",
    "ncd_float8u",
    "i",
    "gid",
    "acc",
    "restrict",
    "sizeof",
    "return",
    "_",
    "x0",
    "k0",
    "in0",
    "out1",
    "w",
    "t_1",
    "i_x",
    "ENDIAN_LITTLE",
    "true",
    "false",
    "NULL",
]
names = st.one_of(
    st.sampled_from(HOSTILE), st.from_regex(r"[A-Za-z_][A-Za-z0-9_]{0,12}", fullmatch=True)
)


@settings(max_examples=6, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(a=names, b=names, c=names, block=names)
def test_hostile_names_build_and_match(a: str, b: str, c: str, block: str) -> None:
    """Axis names, a block name and an op name drawn from predefined identifiers: the model
    builds and matches the reference (layernorm, a linear map, a streamed attention)."""
    d, e, r = Axis(a, size=8), Axis(b, size=8), Axis(c, size=5)
    if len({a, b, c}) < 3:
        return  # one name for two axes is a different model (alignment by name)
    body = (ops.layernorm(d) >> ops.linear([d], [e], name=block)).named(block).over(r)
    att = nn.attention(
        q=Axis(a, size=7),
        x=Axis(b, size=13),
        d=Axis(c, size=8),
        v=Axis(block if block not in (a, b, c) else "v", size=8),
    )
    model = body @ att
    g = model.graph
    rng = np.random.default_rng(1)
    xs = [rng.standard_normal(g.shape(v)).astype(np.float32) for v in g.inputs]
    params = ncd.init(model, seed=1)
    got = OpenCLExecutable(model)(*xs, params=params)
    want = ncd.run(model, *xs, params=params)
    for x, y in zip(got, want, strict=True):
        np.testing.assert_allclose(x, y, rtol=1e-4, atol=1e-5)


def _doubling_op(kind_: str) -> type[Op]:
    """A plugin's elementwise op of kind ``kind_`` (it doubles its input)."""

    @attrs.frozen
    class Doubling(Op):
        kind: ClassVar[str] = kind_
        category: ClassVar[str] = "elementwise"

        def signature(self) -> Signature:
            return ((),), ((),)

    return Doubling


@pytest.mark.parametrize("kind", ["nb", "mb", "a0", "b1", "c0_1"])
def test_plugin_op_kinds_never_take_a_template_name(
    kind: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A plugin op named like a variable the tiled matmul declares itself (``const int nb``,
    the row pointer ``a0``, the accumulator ``c0_1``), in that kernel's epilogue: its value is
    named behind the class tag (``t_nb``), so the kernel builds and matches."""
    op = _doubling_op(kind)
    monkeypatch.setitem(CODEGEN_RULES, op, lambda g, n, i: f"(2.0f * {g.load(n.inputs[0], i)})")
    model = (ops.linear("d -> e") >> ops.prim(op())).over(_ax("s", 13)).bind(d=16, e=8)
    assert [k.style for k in generate(model.graph).kernels] == ["tiled"]
    same = (ops.linear("d -> e") >> ops.mul(2.0)).over(_ax("s", 13)).bind(d=16, e=8)
    params = ncd.init(model, seed=0)
    x = np.random.default_rng(0).standard_normal((13, 16)).astype(np.float32)
    np.testing.assert_allclose(
        OpenCLExecutable(model)(x, params=params),
        ncd.run(same, x, params=params),
        rtol=1e-4,
        atol=1e-5,
    )
