"""Finding 9 (OpenCL side): arrays the float32 build cannot take exactly are refused before any
device work; parameters changed in place between calls are seen."""

from __future__ import annotations

import numpy as np
import pytest

import ncd
from ncd import nn, ops

pytest.importorskip("pyopencl")
pytestmark = pytest.mark.opencl


def _model() -> ncd.Term:  # type: ignore[name-defined]
    return (ops.linear("d -> e", d=13, e=7) >> ops.gelu()).over(ncd.Axis("s", size=301))


@pytest.mark.parametrize(
    "bad",
    [
        np.ones((301, 13), np.float64),
        np.ones((301, 13), np.complex64),
        np.ones((301, 13), np.int64),
        np.full((301, 13), 1.0, object),
    ],
)
def test_lossy_inputs_are_refused_before_device_work(bad: np.ndarray) -> None:
    model = _model()
    exe = ncd.compile(model, "opencl")
    with pytest.raises(ncd.DTypeError):
        exe(bad, params=ncd.init(model))
    assert not exe._built  # type: ignore[attr-defined]  # nothing generated, built or run


def test_lossy_parameters_are_refused() -> None:
    model = _model()
    params = {k: v.astype(np.float64) for k, v in ncd.init(model).items()}
    with pytest.raises(ncd.DTypeError, match="linear"):
        ncd.compile(model, "opencl")(np.ones((301, 13), np.float32), params=params)


def test_exact_narrow_dtypes_are_taken() -> None:
    model = _model()
    params = ncd.init(model, seed=2)
    x = np.random.default_rng(0).standard_normal((301, 13)).astype(np.float16)
    half = {k: v.astype(np.float16) for k, v in params.items()}  # converted, never in place
    got = ncd.compile(model, "opencl")(x, params=half)
    want = ncd.run(model, x.astype(np.float64), params=half)
    np.testing.assert_allclose(got, want, rtol=2e-4, atol=2e-4)


@pytest.mark.parametrize("layout", ["contiguous", "strided", "float16"])
def test_parameters_changed_in_place_are_seen(layout: str) -> None:
    model = _model()
    exe = ncd.compile(model, "opencl")
    params: dict[str, np.ndarray] = dict(ncd.init(model, seed=1))
    if layout == "strided":  # not C-contiguous: converted on every call
        params["linear.weight"] = np.asfortranarray(params["linear.weight"])
    if layout == "float16":
        params["linear.weight"] = params["linear.weight"].astype(np.float16)
    x = np.random.default_rng(1).standard_normal((301, 13)).astype(np.float32)
    for step in range(3):
        want = ncd.run(model, x, params={k: v.astype(np.float64) for k, v in params.items()})
        np.testing.assert_allclose(exe(x, params=params), want, rtol=5e-3, atol=5e-3)
        params["linear.weight"] *= -0.5  # in place, same array object
        params["linear.bias"][step] = 1.0 + step


def test_gpt_parameters_updated_in_place_between_calls() -> None:
    gpt = nn.gpt(layers=1).bind(seq=7, d_model=16, heads=2, d_head=8, d_ff=24, vocab=13)
    params = ncd.init(gpt, seed=0)
    exe = ncd.compile(gpt, "opencl")
    tokens = np.arange(7) % 13
    exe(tokens, params=params)
    for arr in params.values():  # a training step, in place
        arr += np.float32(0.01) * np.sign(arr)
    want = ncd.run(gpt, tokens, params={k: v.astype(np.float64) for k, v in params.items()})
    np.testing.assert_allclose(exe(tokens, params=params), want, rtol=2e-4, atol=2e-4)


def test_read_only_arrays_are_read_in_place() -> None:
    model = _model()
    params = ncd.init(model, seed=4)
    x = np.random.default_rng(4).standard_normal((301, 13)).astype(np.float32)
    for arr in (x, *params.values()):
        arr.flags.writeable = False  # e.g. memory-mapped weights
    want = ncd.run(model, x.astype(np.float64), params=params)
    np.testing.assert_allclose(
        ncd.compile(model, "opencl")(x, params=params), want, rtol=2e-4, atol=2e-4
    )
