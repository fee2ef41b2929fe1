"""Finding 8: out= arrays may not overlap each other; builds per executable and programs per
process are bounded (LRU); dropping an executable frees its builds and device buffers."""

from __future__ import annotations

import gc
import sys
import uuid
import weakref

import numpy as np
import pytest

import ncd
from ncd import ops

pytest.importorskip("pyopencl")
pytestmark = pytest.mark.opencl

from ncd_opencl import program  # noqa: E402
from ncd_opencl.backend import Compiled  # noqa: E402


def _two_outputs() -> ncd.Term:  # type: ignore[name-defined]
    r, c, e = ncd.Axis("r", size=7), ncd.Axis("c", size=13), ncd.Axis("e", size=13)
    return (ops.softmax(c) @ ops.tanh().over(e)).over(r)  # two inputs, two outputs


@pytest.mark.parametrize("overlap", ["same", "view", "partial"])
def test_out_arrays_overlapping_each_other_are_refused(overlap: str) -> None:
    model = _two_outputs()
    g = model.graph
    exe = ncd.compile(model, "opencl")
    x, y = (
        np.random.default_rng(k).standard_normal(g.shape(v)).astype(np.float32)
        for k, v in enumerate(g.inputs)
    )
    shape0, shape1 = (g.shape(v) for v in g.outputs)  # 7 x 13 and 13 x 7
    big = np.empty(7 * 13 + 5, np.float32)
    buf = big[: 7 * 13].reshape(shape0)
    other = {
        "same": big[: 7 * 13].reshape(shape1),
        "view": buf.reshape(shape1),
        "partial": big[5:].reshape(shape1),
    }[overlap]
    with pytest.raises(ncd.SizeError, match=r"out\[1\] shares memory with out\[0\]"):
        exe(x, y, out=(buf, other))
    a, b = np.empty(shape0, np.float32), np.empty(shape1, np.float32)
    got = exe(x, y, out=(a, b))  # separate arrays: both written
    want = ncd.run(model, x, y)
    assert got[0] is a and got[1] is b
    for out, ref in zip(got, want, strict=True):
        np.testing.assert_allclose(out, ref, rtol=1e-5, atol=1e-6)


def _live_builds() -> int:
    gc.collect()
    return sum(isinstance(o, Compiled) for o in gc.get_objects())


def test_builds_per_executable_are_bounded_and_freed_with_it() -> None:
    model = ops.softmax(ncd.Axis("x")).over(ncd.Axis("r"))
    before = _live_builds()
    # specialise: one build per size set (free sizes as arguments: tests/opencl/test_free_sizes)
    exe = ncd.compile(model, "opencl", max_builds=3, specialise=True)
    refs = []
    for n in (1, 7, 13, 301, 2, 3):
        x = np.random.default_rng(n).standard_normal((2, n)).astype(np.float32)
        np.testing.assert_allclose(exe(x), ncd.run(model, x), rtol=1e-5, atol=1e-6)
        refs.append(weakref.ref(exe.compiled(ncd.reference.prepare(model, [x], None)[0])))  # type: ignore[attr-defined]
    assert len(exe._built) == 3  # type: ignore[attr-defined]
    gc.collect()
    assert [r() is None for r in refs] == [True, True, True, False, False, False]
    x = np.ones((2, 7), np.float32)  # an evicted size is built again, and still right
    np.testing.assert_allclose(exe(x), ncd.run(model, x), rtol=1e-5, atol=1e-6)
    buffers = [b for c in exe._built.values() for b in c.values.values()]  # type: ignore[attr-defined]
    assert buffers
    del exe
    assert _live_builds() == before
    # nothing but this list holds the device buffers now (as for a fresh object held the
    # same way): they are released when it goes
    control = [object()]
    assert {sys.getrefcount(b) for b in buffers} == {sys.getrefcount(o) for o in control}


def test_default_build_bound_and_bad_bound() -> None:
    exe = ncd.compile(ops.relu().over(ncd.Axis("r")), "opencl", specialise=True)
    for n in range(1, 10):  # nine sizes: one past the bound
        exe(np.ones(n, np.float32))
    assert len(exe._built) == 8  # type: ignore[attr-defined]
    with pytest.raises(ncd.SizeError, match="max_builds"):
        ncd.compile(ops.relu(), "opencl", max_builds=0)


def test_programs_kept_in_memory_are_bounded(monkeypatch) -> None:  # type: ignore[no-untyped-def]
    monkeypatch.setenv("NCD_OPENCL_PROGRAMS", "3")
    monkeypatch.setenv("NCD_OPENCL_CACHE_MB", "0")  # no disk cache for these throwaways
    tag = uuid.uuid4().hex
    sources = [
        f"// {tag} {k}\n__kernel void k{k}(__global float* a) {{ a[0] = {k}.0f; }}\n"
        for k in range(5)
    ]
    progs = [program.build(s) for s in sources]
    assert len(program._PROGRAMS) <= 3
    assert program.build(sources[4]) is progs[4]  # most recent: still remembered
    builds = program.STATS["builds"]
    program.build(sources[0])  # evicted: built again
    assert program.STATS["builds"] == builds + 1


@pytest.mark.parametrize("given", [False, True])
def test_a_value_returned_twice_fills_both_outputs(given: bool) -> None:
    r = ncd.Axis("r", size=301)

    @ncd.trace
    def twice(x):  # type: ignore[no-untyped-def]
        y = ops.tanh().over(r)(x)
        return y, y, x

    x = np.linspace(-3, 3, 301).astype(np.float32)
    x[:3] = [np.inf, -np.inf, np.nan]
    outs = tuple(np.full(301, 7.0, np.float32) for _ in range(3)) if given else None
    got = ncd.compile(twice, "opencl")(x, out=outs)
    want = ncd.run(twice, x)
    assert len({id(a) for a in got}) == 3  # three separate arrays
    for out, ref in zip(got, want, strict=True):
        np.testing.assert_allclose(out, ref, rtol=1e-5, atol=1e-6)
