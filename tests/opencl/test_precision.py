"""float16, bfloat16 and float64 on OpenCL against the reference interpreter.

Tolerances come from each format's machine epsilon ``eps`` (2^-7 bfloat16, 2^-10 float16,
2^-52 float64): an output may differ from the reference by ``c * eps * (|ref| + scale)`` with
``scale = max(1, max |ref|)``. Both sides round the same float32 (float64) arithmetic to the
output format, so most elements agree exactly; an element whose float32 value lies next to a
rounding boundary may round the other way (one ulp, ``c = 2`` covers it). A contraction or a
model sums in another order than NumPy and carries such a flip through later layers: ``c``
grows with the length of the sums (``CONTRACTION``) and the depth of the model (``MODEL``).
"""

from __future__ import annotations

from typing import Any

import ml_dtypes
import numpy as np
import pytest

import ncd
from ncd import nn, ops
from ncd.testing import ELEMENTWISE, MODEL, assert_close_in_format, contraction, position_cases
from ncd.testing import random_inputs as inputs

pytest.importorskip("pyopencl")

FORMATS = {"bfloat16": ncd.bfloat16, "float16": ncd.float16, "float64": ncd.float64}
SIZES = (1, 7, 13, 301)


def check(model: Any, fmt: Any, c: float, **options: Any) -> set[str]:
    """Run ``model`` on OpenCL and the reference; compare at ``c`` epsilons; return the styles
    of the kernels that ran."""
    xs = inputs(model)
    params = ncd.init(model, seed=0)
    exe = ncd.compile(model, "opencl", **options)
    got = exe(*xs, params=params)
    want = ncd.run(model, *xs, params=params)
    assert_close_in_format(got, want, fmt, c)
    graph = ncd.reference.prepare(model, xs, params)[0]
    return {k.style for k in exe.compiled(graph).gen.kernels}


@pytest.fixture(params=list(FORMATS), ids=list(FORMATS))
def fmt(request: Any) -> Any:
    return FORMATS[request.param]


@pytest.mark.parametrize("n", SIZES)
@pytest.mark.parametrize(
    "make",
    [
        lambda n: ops.softmax("x").over("r").bind(r=5, x=n),
        lambda n: ops.layernorm("d").over("r").bind(r=5, d=n),
        lambda n: ops.rmsnorm("d").over("r").bind(r=5, d=n),
        lambda n: ops.l2norm("d").over("r").bind(r=5, d=n),
        lambda n: (
            (ops.unary("gelu") >> ops.scalar("mul", 3.0) >> ops.unary("exp")).over("r").bind(r=n)
        ),
    ],
    ids=["softmax", "layernorm", "rmsnorm", "l2norm", "elementwise"],
)
def test_normalisers_and_elementwise(make: Any, n: int, fmt: Any) -> None:
    assert check(make(n).cast(fmt), fmt, ELEMENTWISE) == {"pointwise"}


@pytest.mark.parametrize("n", [16, 304])
@pytest.mark.parametrize(
    "make",
    [
        lambda n: ops.softmax("x").over("r").bind(r=7, x=n),
        lambda n: ops.layernorm("d").over("r").bind(r=7, d=n),
        lambda n: ops.rmsnorm("d").over("r").bind(r=7, d=n),
        lambda n: (ops.unary("gelu") >> ops.unary("exp")).over("r").bind(r=n),
    ],
    ids=["softmax", "layernorm", "rmsnorm", "elementwise"],
)
@pytest.mark.parametrize("fmt", [ncd.bfloat16, ncd.float16], ids=["bfloat16", "float16"])
def test_vector_rows_in_16_bit_formats(make: Any, n: int, fmt: Any) -> None:
    """Rows a multiple of the vector width: 8-lane loads and stores converting bfloat16 (shift
    and rounding on ushort8) and float16 (vload_half8 / vstore_half8_rte)."""
    assert check(make(n).cast(fmt), fmt, ELEMENTWISE) == {"vector"}


@pytest.mark.parametrize("n", SIZES)
def test_linear_tiled(n: int, fmt: Any) -> None:
    """K = 16 (a multiple of the template's vector width): the tiled template, any M."""
    model = ops.linear("d", "e").over("s").bind(s=max(n, 4), d=16, e=7).cast(fmt)
    assert "tiled" in check(model, fmt, contraction(16))


@pytest.mark.parametrize("n", SIZES)
def test_linear_pointwise(n: int, fmt: Any) -> None:
    """K of any size (no tiled template past a K that is not a multiple of 8) and tiled=False."""
    model = ops.linear("d", "e").over("s").bind(s=13, d=n, e=5).cast(fmt)
    assert check(model, fmt, contraction(n), tiled=False) == {"pointwise"}
    check(model, fmt, contraction(n))


def test_local_memory_tiles(fmt: Any) -> None:
    model = ops.linear("d", "e").over("s").bind(s=13, d=24, e=7).cast(fmt)
    assert "tiled" in check(model, fmt, contraction(24), local_memory=True)


def test_mlp(fmt: Any) -> None:
    model = nn.mlp().over("s").bind(s=13, d_model=16, d_ff=24).cast(fmt)
    assert "tiled" in check(model, fmt, MODEL)


@pytest.mark.parametrize("n", SIZES)
def test_causal_attention(n: int, fmt: Any) -> None:
    model = nn.attention(causal=True).over("h").bind(h=2, q=n, x=n, d=8, v=8).cast(fmt)
    assert check(model, fmt, contraction(max(n, 8))) == {"streamed"}


def test_gpt_two_layers(fmt: Any) -> None:
    model = nn.gpt(layers=2).bind(seq=13, d_model=16, heads=2, d_head=8, d_ff=32, vocab=11)
    assert {"tiled", "streamed"} <= check(model.cast(fmt), fmt, MODEL)


def test_acceptance_softmax_bf16() -> None:
    sm = ops.softmax("x").over("r").cast(ncd.bfloat16)
    x = np.random.default_rng(0).standard_normal((37, 301)).astype(ml_dtypes.bfloat16)
    out = ncd.compile(sm, "opencl")(x)
    assert out.dtype == ml_dtypes.bfloat16
    assert np.allclose(out.astype(np.float32), ncd.run(sm, x).astype(np.float32), atol=8e-3)


# -- non-finite values ---------------------------------------------------------------------------


@pytest.mark.filterwarnings("ignore::RuntimeWarning")  # NumPy on inf/NaN in the reference
@pytest.mark.parametrize("fmt", [ncd.bfloat16, ncd.float16], ids=["bfloat16", "float16"])
@pytest.mark.parametrize(
    "make",
    [
        lambda: ops.softmax("x").over("r").bind(r=4, x=13),
        lambda: ops.layernorm("x").over("r").bind(r=4, x=13),
        lambda: (ops.unary("relu") >> ops.unary("exp")).over("x").over("r").bind(r=13, x=4),
    ],
    ids=["softmax", "layernorm", "elementwise"],
)
def test_non_finite_inputs(make: Any, fmt: Any) -> None:
    model = make().cast(fmt)
    (x,) = inputs(model, seed=3)
    x[0, 3], x[1, 5], x[2, 0], x[3, :] = np.inf, -np.inf, np.nan, -np.inf  # a row all -inf
    params = ncd.init(model, seed=0)
    got = ncd.compile(model, "opencl")(x, params=params).astype(np.float32)
    want = ncd.run(model, x, params=params).astype(np.float32)
    np.testing.assert_array_equal(np.isnan(got), np.isnan(want))
    np.testing.assert_array_equal(np.isinf(got), np.isinf(want))
    fin = np.isfinite(want)
    np.testing.assert_allclose(got[fin], want[fin], rtol=2 * fmt.eps, atol=2 * fmt.eps)


@pytest.mark.filterwarnings("ignore::RuntimeWarning")  # NumPy on inf/NaN in the reference
def test_float16_overflow_stores_infinity() -> None:
    model = ops.cast(ncd.float16).over("r")
    x = np.array([1e5, -1e5, 65504, 65519, 65520, 6e-8, 1e-8, np.inf, np.nan], np.float32)
    got = ncd.compile(model, "opencl")(x)
    want = x.astype(np.float16)
    assert got.dtype == np.float16
    fin = ~np.isnan(want)
    np.testing.assert_array_equal(got.view(np.uint16)[fin], want.view(np.uint16)[fin])
    assert np.isnan(got[-1])
    assert np.isposinf(got[0]) and np.isneginf(got[1]) and np.isposinf(got[4])


#: float32 bit patterns where rounding to bfloat16 is easy to get wrong
TRICKY = [
    0x3F808000,  # 1 + 2^-8: a tie, to the even 1.0
    0x3F818000,  # a tie, to the even 0x3f82
    0x3F80FFFF,  # just below a tie
    0x3F808001,  # just above a tie
    0x7F7FFFFF,  # float32 max: rounds up to infinity
    0x7F7F8000,  # a tie at the top: to infinity (even)
    0x7F7F7FFF,  # below it: bfloat16 max
    0x00000001,  # the smallest subnormal: to zero
    0x00008000,  # a subnormal tie: to zero (even)
    0x00018000,  # a subnormal tie: up to 0x0002
    0x007FFFFF,  # the largest subnormal: up to the smallest normal
    0x80018000,  # negative subnormal tie
    0xBF808000,  # negative tie
    0x80000000,  # -0
    0x7F800000,  # inf
    0xFF800000,  # -inf
    0x7FC00000,  # quiet NaN
    0xFFC00000,  # negative quiet NaN
    0x7F800001,  # a NaN whose payload lies in the dropped bits only
    0x7FBFFFFF,  # a signalling NaN with a full payload
]


@pytest.mark.filterwarnings("ignore::RuntimeWarning")  # NumPy on inf/NaN in the reference
@pytest.mark.parametrize("lanes", [False, True], ids=["scalar", "vector"])
def test_bfloat16_rounding_is_nearest_even_bit_exact(lanes: bool) -> None:
    bits = np.array(TRICKY * 2, np.uint32)[: 32 if lanes else 35]
    x = bits.view(np.float32)
    model = ops.cast(ncd.bfloat16).over("r").bind(r=len(x))  # bound: the length picks the path
    exe = ncd.compile(model, "opencl")
    got = exe(x)
    assert got.dtype == ml_dtypes.bfloat16
    graph = ncd.reference.prepare(model, [x], None)[0]
    assert {k.style for k in exe.compiled(graph).gen.kernels} == {
        "vector" if lanes else "pointwise"
    }
    want = x.astype(ml_dtypes.bfloat16)
    nan = np.isnan(x)
    np.testing.assert_array_equal(got.view(np.uint16)[~nan], want.view(np.uint16)[~nan])
    assert np.isnan(got.astype(np.float32)[nan]).all()  # NaN stays NaN, never infinity
    canonical = np.isin(bits, [0x7FC00000, 0xFFC00000])
    np.testing.assert_array_equal(got.view(np.uint16)[canonical], want.view(np.uint16)[canonical])


# -- mixed formats, parameters, out= -------------------------------------------------------------


def test_mixed_formats_with_casts() -> None:
    """A float32 linear, cast to bfloat16, a bfloat16 softmax, back to float32."""
    model = (
        ops.linear("d", "e").over("s")
        >> ops.cast(ncd.bfloat16)
        >> ops.softmax("e").over("s").cast(ncd.bfloat16)
        >> ops.cast(ncd.float32)
    ).bind(s=13, d=16, e=7)
    assert {str(t.dtype) for t in model.graph.values} == {"float32", "bfloat16"}
    x = np.random.default_rng(1).standard_normal((13, 16)).astype(np.float32)
    params = ncd.init(model, seed=0)
    got = ncd.compile(model, "opencl")(x, params=params)
    want = ncd.run(model, x, params=params)
    assert got.dtype == np.float32
    # the softmax's bfloat16 output is rounded in the kernel as in the reference (one flip)
    np.testing.assert_allclose(got, want, rtol=2 * ncd.bfloat16.eps, atol=1e-6)


def test_parameters_and_out_in_the_wire_format() -> None:
    model = ops.layernorm("d").over("r").bind(r=7, d=13).cast(ncd.bfloat16)
    params = ncd.init(model, seed=0)
    assert all(p.dtype == ml_dtypes.bfloat16 for p in params.values())
    x = np.random.default_rng(2).standard_normal((7, 13)).astype(ml_dtypes.bfloat16)
    exe = ncd.compile(model, "opencl")
    out = np.empty((7, 13), ml_dtypes.bfloat16)
    assert exe(x, params=params, out=out) is out
    np.testing.assert_array_equal(out.view(np.uint16), exe(x, params=params).view(np.uint16))
    with pytest.raises(ncd.NcdError, match=r"ml_dtypes\.bfloat16"):
        exe(x, params=params, out=np.empty((7, 13), np.float32))
    key = next(iter(params))
    params[key][...] = 0  # read in place: the change is seen by the next call
    assert not np.array_equal(exe(x, params=params).view(np.uint16), out.view(np.uint16))


def test_capabilities_list_the_formats() -> None:
    from ncd_opencl.backend import OpenCLBackend

    assert {"float32", "float16", "bfloat16", "float64"} <= OpenCLBackend.capabilities


def test_unsupported_format_is_refused_before_building(monkeypatch: Any) -> None:
    import ncd_opencl.program as program

    def no_build(*a: Any, **k: Any) -> Any:
        raise AssertionError("built")

    monkeypatch.setattr(program, "build", no_build)
    model = ops.softmax("x").over("r").bind(r=3, x=5).cast(ncd.float8_e4m3)
    x = np.zeros((3, 5), ml_dtypes.float8_e4m3fn)
    with pytest.raises(ncd.DTypeError, match=r"float8_e4m3.*Fix:"):
        ncd.compile(model, "opencl")(x)


# -- float64 and devices without it ---------------------------------------------------------------


def test_float64_program_enables_fp64_only_when_used() -> None:
    m = ops.softmax("x").over("r").bind(r=3, x=5)
    assert "cl_khr_fp64" not in ncd.export(m, "opencl")
    assert "cl_khr_fp64" in ncd.export(m.cast(ncd.float64), "opencl")
    assert "ncd_bf16" not in ncd.export(m.cast(ncd.float16), "opencl")
    assert "ncd_bf16_store" in ncd.export(m.cast(ncd.bfloat16), "opencl")


def test_float64_refused_on_a_device_without_fp64(monkeypatch: Any) -> None:
    import ncd_opencl.backend as backend
    import ncd_opencl.program as program

    def no_build(*a: Any, **k: Any) -> Any:
        raise AssertionError("built")

    monkeypatch.setattr(backend, "device_has_fp64", lambda device: False)
    monkeypatch.setattr(program, "build", no_build)
    model = ops.softmax("x").over("r").bind(r=3, x=5).cast(ncd.float64)
    x = np.zeros((3, 5))
    with pytest.raises(ncd.DTypeError) as err:
        ncd.compile(model, "opencl")(x)
    text = str(err.value)
    assert "float64" in text and "softmax" in text and "device" in text
    assert "Fix: cast the model to float32" in text


@pytest.mark.filterwarnings("ignore::RuntimeWarning")  # NumPy on inf/NaN, overflow to inf
@pytest.mark.parametrize("lanes", [False, True], ids=["scalar", "vector"])
def test_float16_rounding_is_nearest_even_bit_exact(lanes: bool) -> None:
    """Every midpoint between neighbouring halves and the floats either side of it, through
    the bit-level scalar store and the vstore_half8_rte vector store."""
    halves = np.arange(65536, dtype=np.uint16).view(np.float16).astype(np.float32)
    halves = halves[np.isfinite(halves)]
    halves = np.sort(halves)
    mid = ((halves[:-1].astype(np.float64) + halves[1:]) / 2).astype(np.float32)
    x = np.concatenate(
        [mid, np.nextafter(mid, np.float32(np.inf)), np.nextafter(mid, -np.float32(np.inf))]
    )
    x = np.concatenate([x, np.array([65520, -65520, 1e9, np.inf, -np.inf, -0.0], np.float32)])
    x = x[: len(x) // 8 * 8] if lanes else x[: len(x) // 8 * 8 - 1]
    model = ops.cast(ncd.float16).over("r").bind(r=len(x))  # bound: the length picks the path
    exe = ncd.compile(model, "opencl")
    got = exe(x)
    graph = ncd.reference.prepare(model, [x], None)[0]
    assert {k.style for k in exe.compiled(graph).gen.kernels} == {
        "vector" if lanes else "pointwise"
    }
    np.testing.assert_array_equal(got.view(np.uint16), x.astype(np.float16).view(np.uint16))


@pytest.mark.parametrize(
    ("make", "shapes"),
    [
        (lambda: ops.softmax("x").over("r"), lambda n: [(5, n)]),
        (lambda: ops.l2norm("x").over("r"), lambda n: [(5, n)]),
        (
            lambda: nn.attention(causal=True).over("h").bind(h=2, d=8, v=8),
            lambda n: [(2, n, 8)] * 3,
        ),
        (lambda: nn.mlp().over("s").bind(d_model=16, d_ff=24), lambda n: [(n, 16)]),
    ],
    ids=["softmax", "l2norm", "attention", "mlp"],
)
def test_free_sizes_in_every_format(make: Any, shapes: Any, fmt: Any) -> None:
    """Sizes left to run time (kernel arguments, vector tails): one build serves every length."""
    model = make().cast(fmt)
    exe = ncd.compile(model, "opencl")
    params = ncd.init(model, seed=0)
    for n in SIZES:
        xs = [np.random.default_rng(n).standard_normal(s).astype(fmt.numpy) for s in shapes(n)]
        got = exe(*xs, params=params).astype(np.float64)
        want = ncd.run(model, *xs, params=params).astype(np.float64)
        scale = max(1.0, float(np.max(np.abs(want))))
        tol = contraction(max(n, 24)) * fmt.eps * (np.abs(want) + scale)
        assert (np.abs(got - want) <= tol).all(), n
    assert exe.builds == 1


@pytest.mark.parametrize("fmt", [ncd.bfloat16, ncd.float16], ids=["bfloat16", "float16"])
@pytest.mark.parametrize("case", position_cases(), ids=lambda c: c.name)
def test_positions_stay_exact_in_16_bit_formats(case: Any, fmt: Any) -> None:
    """An argmax, max-pool indices, a running product and one-hot targets past 256 (2048):
    the kernels search positions in float32 as the reference does (issue 15)."""
    case.check(ncd.compile(case.model.cast(fmt), "opencl")(*case.inputs_in(fmt)), fmt)
