"""The cuda backend against the reference interpreter: ncd.testing's conformance suite (as
tests/opencl run it), 16-bit casts of a few models at awkward sizes, device arrays used in
place, and repeated calls. On a GPU where one runs; elsewhere on the host emulator
(``ncd_cuda.emulate``: the same generated CUDA, launches and buffers, on host threads), the
tests of device arrays skipped; skipped as a whole without either (the reason says why).

16-bit tolerances follow tests/opencl/test_precision.py: ``c * eps * (|ref| + scale)`` with
``scale = max(1, max |ref|)``, ``c`` growing with the length of sums and the depth of the model.
"""

from __future__ import annotations

from typing import Any, ClassVar

import ml_dtypes
import numpy as np
import pytest

import ncd
from ncd import nn, ops
from ncd.testing import (
    ELEMENTWISE,
    MODEL,
    BackendConformance,
    assert_close_in_format,
    case_by_name,
    contraction,
)
from ncd.testing import random_inputs as inputs
from ncd_cuda import emulate
from ncd_cuda.program import build
from ncd_cuda.runtime import probe

_FOUND = probe()
ON_GPU = _FOUND.ok
if not ON_GPU and not emulate.available():
    pytest.skip(
        f"{_FOUND.missing or 'no CUDA GPU here'}; and no host C++ compiler for the emulator",
        allow_module_level=True,
    )
#: where the kernels run: the first GPU, else the host emulator
DEVICE: int | str = 0 if ON_GPU else "emulator"
gpu_only = pytest.mark.skipif(not ON_GPU, reason="device arrays need a GPU (the emulator has none)")

FORMATS = {"bfloat16": ncd.bfloat16, "float16": ncd.float16}
SIZES = (1, 7, 13, 301, 1000)


class TestCudaConformance(BackendConformance):
    """Every conformance case at float32 with the base tolerances (IEEE math: NVRTC without
    fast-math)."""

    target = "cuda"
    expected_failures: ClassVar[dict[str, str]] = {}
    compile_options: ClassVar[dict[str, Any]] = {"device": DEVICE}


def check(model: Any, fmt: Any, c: float) -> None:
    """Run ``model`` on the GPU and the reference; compare at ``c`` epsilons of ``fmt``."""
    xs = inputs(model)
    params = ncd.init(model, seed=0)
    got = ncd.compile(model, "cuda", device=DEVICE)(*xs, params=params)
    want = ncd.run(model, *xs, params=params)
    assert_close_in_format(got, want, fmt, c)


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
        lambda n: (
            (ops.unary("gelu") >> ops.scalar("mul", 3.0) >> ops.unary("exp")).over("r").bind(r=n)
        ),
    ],
    ids=["softmax", "layernorm", "rmsnorm", "elementwise"],
)
def test_normalisers_and_elementwise(make: Any, n: int, fmt: Any) -> None:
    check(make(n).cast(fmt), fmt, ELEMENTWISE)


@pytest.mark.parametrize(("s", "d", "e"), [(13, 16, 7), (1, 24, 5), (301, 64, 33), (128, 64, 64)])
def test_linear(s: int, d: int, e: int, fmt: Any) -> None:
    """Contractions of awkward sizes (the tensor-core template's edges included)."""
    check(ops.linear("d", "e").over("s").bind(s=s, d=d, e=e).cast(fmt), fmt, contraction(d))


@pytest.mark.parametrize(("s", "d", "e"), [(13, 16, 7), (1, 24, 5), (301, 64, 33), (70, 130, 3)])
@pytest.mark.parametrize("wide", [ncd.float32, ncd.float64], ids=["float32", "float64"])
def test_linear_on_cuda_cores(s: int, d: int, e: int, wide: Any) -> None:
    """float32/float64 contractions on the CUDA-core matmul (``ncd_cuda.simt``): awkward M, N
    and K, a bias, and a GELU epilogue."""
    model = (ops.linear("d", "e").over("s") >> ops.unary("gelu")).bind(s=s, d=d, e=e).cast(wide)
    check(model, wide, contraction(d))


@pytest.mark.parametrize("tiles", [{("a", 0): 128, ("c", 0): 32}, {("a", 0): 16, ("c", 0): 64}])
def test_cuda_core_matmul_with_the_plans_block_tile(tiles: dict) -> None:
    model = ops.einsum("a b, b c -> a c").bind(a=130, b=40, c=77)
    plan = ncd.plan(model, target="cuda", tiles=tiles)
    rng = np.random.default_rng(6)
    x, y = rng.standard_normal((130, 40)), rng.standard_normal((40, 77))
    x, y = x.astype(np.float32), y.astype(np.float32)
    got = ncd.compile(model, "cuda", device=DEVICE, plan=plan)(x, y)
    np.testing.assert_allclose(got, ncd.run(model, x, y), rtol=1e-5, atol=1e-5)


def test_linear_on_cuda_cores_with_free_rows() -> None:
    model = ops.linear("d", "e").over("s").bind(d=24, e=40)
    exe = ncd.compile(model, "cuda", device=DEVICE)
    params = ncd.init(model, seed=0)
    for s in (1, 67, 130):
        x = np.random.default_rng(s).standard_normal((s, 24)).astype(np.float32)
        want = ncd.run(model, x, params=params)
        np.testing.assert_allclose(exe(x, params=params), want, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize(("a", "b", "c"), [(1, 13, 7), (70, 40, 72), (13, 300, 129)])
def test_einsum_with_row_major_b(a: int, b: int, c: int, fmt: Any) -> None:
    """``a b, b c``: B staged transposed into shared memory (rows walk fastest in global)."""
    model = ops.einsum("a b, b c -> a c").bind(a=a, b=b, c=c).cast(fmt)
    check(model, fmt, contraction(b))


@pytest.mark.parametrize("fn", ["sum", "max", "min", "mean"])
@pytest.mark.parametrize("n", [64, 301, 1000])
def test_row_reductions_a_warp_per_row(fn: str, n: int) -> None:
    """Lane mode: every lane runs each shuffle once (a NaN-propagating max once ran it up to
    four times per step, in divergent code)."""
    model = ops.reduce(fn, "d").over("r").bind(r=7, d=n)
    x = inputs(model)[0]
    got = ncd.compile(model, "cuda", device=DEVICE)(x)
    np.testing.assert_allclose(got, ncd.run(model, x), rtol=1e-5, atol=1e-5 * n)
    x[3, n // 2] = np.nan
    got = ncd.compile(model, "cuda", device=DEVICE)(x)
    assert np.isnan(got[3]) and not np.isnan(np.delete(got, 3)).any()


@pytest.mark.parametrize("causal", [True, False])
def test_float32_streamed_attention_with_gpu_tiles(causal: bool) -> None:
    model = nn.attention(causal=causal).over("h").bind(h=2, q=301, x=130, d=64, v=64)
    xs = inputs(model)
    got = ncd.compile(model, "cuda", device=DEVICE)(*xs)
    np.testing.assert_allclose(got, ncd.run(model, *xs), rtol=1e-4, atol=1e-5)


def test_mlp(fmt: Any) -> None:
    check(nn.mlp().over("s").bind(s=13, d_model=16, d_ff=24).cast(fmt), fmt, MODEL)


@pytest.mark.parametrize("n", [1, 7, 129, 1000])
def test_causal_attention(n: int, fmt: Any) -> None:
    model = nn.attention(causal=True).over("h").bind(h=2, q=n, x=n, d=64, v=64).cast(fmt)
    check(model, fmt, contraction(max(n, 64)))


def test_gpt_two_layers(fmt: Any) -> None:
    model = nn.gpt(layers=2).bind(seq=13, d_model=16, heads=2, d_head=8, d_ff=32, vocab=11)
    check(model.cast(fmt), fmt, MODEL)


@pytest.mark.parametrize("n", [1, 13, 1025, 100_003])
def test_awkward_float32_sizes(n: int) -> None:
    """One block, one block past the largest, many blocks with a ragged end."""
    model = (ops.unary("gelu") >> ops.unary("exp")).over("r")
    x = np.random.default_rng(1).standard_normal(n).astype(np.float32)
    got = ncd.compile(model, "cuda", device=DEVICE)(x)
    np.testing.assert_allclose(got, ncd.run(model, x), rtol=1e-5, atol=1e-6)


def test_float64() -> None:
    model = ops.softmax("x").over("r").bind(r=7, x=301).cast(ncd.float64)
    x = np.random.default_rng(2).standard_normal((7, 301))
    got = ncd.compile(model, "cuda", device=DEVICE)(x)
    assert got.dtype == np.float64
    np.testing.assert_allclose(got, ncd.run(model, x), rtol=1e-12, atol=1e-14)


def test_repeated_calls_and_new_sizes_rebuild_once_each() -> None:
    model = ops.softmax("x").over("r")
    exe = ncd.compile(model, "cuda", device=DEVICE)
    for shape in [(7, 13), (7, 13), (3, 1000), (7, 13)]:
        x = np.random.default_rng(3).standard_normal(shape).astype(np.float32)
        np.testing.assert_allclose(exe(x), ncd.run(model, x), rtol=1e-5, atol=1e-6)
    assert exe.builds == 2


def test_parameters_changed_in_place_are_seen() -> None:
    case = case_by_name("mlp")
    exe = ncd.compile(case.model, "cuda", device=DEVICE)
    xs, params = case.inputs(), case.params()
    exe(*xs, params=params)
    for p in params.values():
        p *= 0.5
    got = exe(*xs, params=params)
    want = ncd.run(case.model, *xs, params=params)
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-5)


def test_out_is_written() -> None:
    model = ops.softmax("x").over("r").bind(r=7, x=13)
    x = np.random.default_rng(4).standard_normal((7, 13)).astype(np.float32)
    out = np.empty((7, 13), np.float32)
    assert ncd.compile(model, "cuda", device=DEVICE)(x, out=out) is out
    np.testing.assert_allclose(out, ncd.run(model, x), rtol=1e-5, atol=1e-6)


@gpu_only
def test_torch_cuda_tensors_are_used_in_place() -> None:
    torch = pytest.importorskip("torch")
    if not torch.cuda.is_available():
        pytest.skip("torch has no CUDA here")
    model = ops.softmax("x").over("r").bind(r=37, x=301)
    x = torch.randn(37, 301, device="cuda")
    y = torch.empty(37, 301, device="cuda")
    torch.cuda.synchronize()
    assert ncd.compile(model, "cuda", device=DEVICE)(x, out=y) is y
    want = ncd.run(model, x.cpu().numpy())
    np.testing.assert_allclose(y.cpu().numpy(), want, rtol=1e-5, atol=1e-6)
    got = ncd.compile(model, "cuda", device=DEVICE)(x)  # device in, NumPy out
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)


@gpu_only
def test_torch_bfloat16_tensors_as_their_bits() -> None:
    torch = pytest.importorskip("torch")
    if not torch.cuda.is_available():
        pytest.skip("torch has no CUDA here")
    model = ops.softmax("x").over("r").bind(r=5, x=13).cast(ncd.bfloat16)
    x = torch.randn(5, 13, device="cuda").to(torch.bfloat16)
    torch.cuda.synchronize()
    got = ncd.compile(model, "cuda", device=DEVICE)(x.view(torch.int16))
    host = x.view(torch.int16).cpu().numpy().view(ml_dtypes.bfloat16)
    want = ncd.run(model, host)
    np.testing.assert_allclose(
        got.astype(np.float32), want.astype(np.float32), rtol=2 * ncd.bfloat16.eps, atol=1e-3
    )


@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize(("q", "x", "d"), [(64, 64, 64), (130, 77, 32), (70, 70, 128)])
def test_tensor_core_attention(q: int, x: int, d: int, causal: bool, fmt: Any) -> None:
    """The FlashAttention-style template (``ncd_cuda.flash``): partial blocks of queries and
    keys, every head size it takes, causal rows stopping at the block's diagonal."""
    if causal and q > x:
        pytest.skip("rows before the first key see no key: NaN in the reference too")
    model = nn.attention(causal=causal).over("h").bind(h=2, q=q, x=x, d=d, v=d).cast(fmt)
    assert [k.style for k in build(model).kernels] == ["flash"]
    check(model, fmt, contraction(max(x, d)))


def test_numpy_outputs_the_caller_dropped_are_reused() -> None:
    """The output pool (``ncd.pool``): a held output is never written again, a dropped one
    serves a later call."""
    model = ops.softmax("x").over("r").bind(r=7, x=13)
    exe = ncd.compile(model, "cuda", device=DEVICE)
    rng = np.random.default_rng(5)
    xs = [rng.standard_normal((7, 13)).astype(np.float32) for _ in range(4)]
    held = exe(xs[0])
    exe(xs[1])  # dropped at once
    again = exe(xs[2])
    assert exe.pool.reused >= 1
    np.testing.assert_allclose(held, ncd.run(model, xs[0]), rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(again, ncd.run(model, xs[2]), rtol=1e-5, atol=1e-6)
