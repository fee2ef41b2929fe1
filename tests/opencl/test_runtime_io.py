"""The runtime reads caller arrays in place on host-memory devices: misaligned and strided inputs,
fresh outputs, inputs left untouched."""

from __future__ import annotations

import numpy as np
import pytest

import ncd
from ncd import ops


def _softmax_rows(r: int, c: int):  # type: ignore[no-untyped-def]
    return ops.softmax(ncd.Axis("x", size=c)).over(ncd.Axis("r", size=r))


def test_misaligned_and_strided_inputs_match_reference() -> None:
    model = _softmax_rows(13, 24)  # 24: vector mode (float8 loads)
    exe = ncd.compile(model, "opencl")
    rng = np.random.default_rng(0)
    raw = rng.standard_normal(13 * 24 + 3).astype(np.float32)
    misaligned = raw[1 : 1 + 13 * 24].reshape(13, 24)  # 4-byte offset: not float8-aligned
    assert misaligned.ctypes.data % 32 != 0
    before = misaligned.copy()
    out = exe(misaligned)
    np.testing.assert_allclose(out, ncd.run(model, before), rtol=1e-5, atol=1e-6)
    np.testing.assert_array_equal(misaligned, before)  # read, never written
    strided = rng.standard_normal((24, 13)).astype(np.float32).T  # not C-contiguous
    np.testing.assert_allclose(
        exe(strided), ncd.run(model, np.ascontiguousarray(strided)), rtol=1e-5, atol=1e-6
    )


def test_each_call_returns_a_fresh_output() -> None:
    model = _softmax_rows(7, 16)
    exe = ncd.compile(model, "opencl")
    a = np.ones((7, 16), np.float32)
    b = np.arange(7 * 16, dtype=np.float32).reshape(7, 16) / 50
    out_a = exe(a)
    kept = out_a.copy()
    out_b = exe(b)
    assert out_a is not out_b
    np.testing.assert_array_equal(out_a, kept)  # the second call did not overwrite the first
    np.testing.assert_allclose(out_b, ncd.run(model, b), rtol=1e-5, atol=1e-6)


def test_out_arrays_are_written_and_returned() -> None:
    model = _softmax_rows(13, 24)
    exe = ncd.compile(model, "opencl")
    x = np.random.default_rng(1).standard_normal((13, 24)).astype(np.float32)
    buf = np.full((13, 24), np.nan, np.float32)
    got = exe(x, out=buf)
    assert got is buf
    np.testing.assert_allclose(buf, ncd.run(model, x), rtol=1e-5, atol=1e-6)
    again = exe(2 * x, out=(buf,))  # a tuple, one array per output
    np.testing.assert_allclose(again, ncd.run(model, 2 * x), rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize(
    "bad",
    [
        np.empty((13, 23), np.float32),  # wrong shape
        np.empty((13, 24), np.float64),  # wrong dtype
        np.empty((24, 13), np.float32).T,  # not C-contiguous
    ],
)
def test_bad_out_is_a_size_error_naming_the_output(bad: np.ndarray) -> None:
    exe = ncd.compile(_softmax_rows(13, 24), "opencl")
    x = np.zeros((13, 24), np.float32)
    with pytest.raises(ncd.SizeError, match=r"out\[0\]"):
        exe(x, out=bad)


def test_out_sharing_memory_with_an_input_is_refused() -> None:
    exe = ncd.compile(_softmax_rows(13, 24), "opencl")
    x = np.zeros((13, 24), np.float32)
    with pytest.raises(ncd.SizeError, match="shares memory"):
        exe(x, out=x)


def test_outputs_the_caller_holds_are_never_reused() -> None:
    """The output pool: an array the caller (or a view, a container, a torch tensor) still
    refers to is never written by a later call; a dropped one is reused, with the new result."""
    model = _softmax_rows(301, 13)  # awkward sizes: no vector mode, a scalar tail
    exe = ncd.compile(model, "opencl")
    rng = np.random.default_rng(1)
    xs = [rng.standard_normal((301, 13)).astype(np.float32) for _ in range(6)]
    want = [ncd.run(model, x) for x in xs]
    held = exe(xs[0])
    view = exe(xs[1])[2:]  # only a view of the second output survives
    box = [exe(xs[2])]
    first = exe(xs[3])
    address = first.ctypes.data
    del first  # dropped: its memory may serve the next call
    again = exe(xs[4])
    assert exe.outputs_reused >= 1
    assert again.ctypes.data == address or exe.outputs_reused > 1
    np.testing.assert_allclose(held, want[0], rtol=1e-5, atol=1e-7)
    np.testing.assert_allclose(view, want[1][2:], rtol=1e-5, atol=1e-7)
    np.testing.assert_allclose(box[0], want[2], rtol=1e-5, atol=1e-7)
    np.testing.assert_allclose(again, want[4], rtol=1e-5, atol=1e-7)
    torch = pytest.importorskip("torch")
    tensor = torch.from_numpy(exe(xs[5]))  # the tensor keeps the array alive
    for x in xs[:3]:
        exe(x)
    np.testing.assert_allclose(tensor.numpy(), want[5], rtol=1e-5, atol=1e-7)


def test_reuse_outputs_false_allocates_every_output() -> None:
    model = _softmax_rows(7, 16)
    exe = ncd.compile(model, "opencl", reuse_outputs=False)
    x = np.ones((7, 16), np.float32)
    for _ in range(4):
        out = exe(x)
    del out
    assert exe.outputs_reused == 0


def test_pool_reuses_in_a_steady_loop_and_keeps_results_apart() -> None:
    model = _softmax_rows(7, 16)
    exe = ncd.compile(model, "opencl")
    rng = np.random.default_rng(2)
    results = []
    for n in range(5):
        x = rng.standard_normal((7, 16)).astype(np.float32)
        y = exe(x)  # the previous y is still held while this call runs
        np.testing.assert_allclose(y, ncd.run(model, x), rtol=1e-5, atol=1e-7)
        results.append((x, y.copy()))
    assert exe.outputs_reused >= 2  # the loop alternates between two arrays
    for x, y in results:
        np.testing.assert_allclose(y, ncd.run(model, x), rtol=1e-5, atol=1e-7)
