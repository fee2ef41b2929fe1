"""Finding 3: one executable shared between threads gives every thread its own right answer
(calls of one executable are serialised by a lock; different executables run in parallel)."""

from __future__ import annotations

import sys
import threading
from collections.abc import Callable, Iterator
from typing import Any

import numpy as np
import pytest

import ncd
from ncd import nn, ops

pytest.importorskip("pyopencl")
pytestmark = pytest.mark.opencl


@pytest.fixture
def fast_switching() -> Iterator[None]:
    """A tiny GIL switch interval, so threads interleave between any two bytecodes."""
    old = sys.getswitchinterval()
    sys.setswitchinterval(1e-6)
    try:
        yield
    finally:
        sys.setswitchinterval(old)


def _in_threads(work: Callable[[int], None], n: int) -> None:
    errors: list[BaseException] = []
    barrier = threading.Barrier(n)

    def body(t: int) -> None:
        try:
            barrier.wait()
            work(t)
        except BaseException as e:  # reported in the main thread
            errors.append(e)

    threads = [threading.Thread(target=body, args=(t,)) for t in range(n)]
    for th in threads:
        th.start()
    for th in threads:
        th.join()
    if errors:
        raise errors[0]


def _model() -> Any:
    # several kernels with intermediates in device memory (fuse=False stores every one)
    r, c = ncd.Axis("r", size=13), ncd.Axis("c", size=7)
    return (
        ops.linear("c -> c2", c=7, c2=7) >> ops.softmax("c2") >> ops.mul(3.0) >> ops.gelu()
    ).over(r), c


@pytest.mark.parametrize("fuse", [False, True])
def test_threads_sharing_one_executable_get_their_own_results(
    fast_switching: None, fuse: bool
) -> None:
    model, _ = _model()
    params = ncd.init(model, seed=1)
    exe = ncd.compile(model, "opencl", fuse=fuse)
    threads, calls = 8, 25
    rng = np.random.default_rng(3)
    xs = [rng.standard_normal((13, 7)).astype(np.float32) * (1 + t) for t in range(threads)]
    want = [ncd.run(model, x.astype(np.float64), params=params) for x in xs]
    exe(xs[0], params=params)  # built before the threads start (first calls: next test)

    def work(t: int) -> None:
        for i in range(calls):
            x = xs[(t + i) % threads]
            np.testing.assert_allclose(
                exe(x, params=params), want[(t + i) % threads], rtol=2e-4, atol=2e-5
            )

    _in_threads(work, threads)


def test_threads_compiling_one_model_on_their_first_call(fast_switching: None) -> None:
    """Two threads make the first call of a fresh executable at once: one build, both right."""
    att = nn.attention(causal=True).bind(q=7, x=7, d=13, v=5)
    exe = ncd.compile(att, "opencl")
    rng = np.random.default_rng(7)
    inputs = [
        [rng.standard_normal(s).astype(np.float32) for s in ((7, 13), (7, 13), (7, 5))]
        for _ in range(2)
    ]
    want = [ncd.run(att, *xs) for xs in inputs]
    got: dict[int, Any] = {}
    _in_threads(lambda t: got.__setitem__(t, exe(*inputs[t])), 2)
    for t in range(2):
        np.testing.assert_allclose(got[t], want[t], rtol=2e-4, atol=2e-5)
    assert len(exe._built) == 1  # type: ignore[attr-defined]


def test_two_executables_run_in_parallel_threads(fast_switching: None) -> None:
    """Different executables (sharing the device's queue and the program cache) in parallel."""
    r = ncd.Axis("r", size=301)
    models = [
        ops.softmax(ncd.Axis("x", size=13)).over(r),
        (ops.layernorm(ncd.Axis("x", size=13)) >> ops.silu()).over(r),
    ]
    exes = [ncd.compile(m, "opencl") for m in models]
    params = [ncd.init(m, seed=0) or None for m in models]
    x = np.random.default_rng(0).standard_normal((301, 13)).astype(np.float32)
    want = [ncd.run(m, x, params=p) for m, p in zip(models, params, strict=True)]

    def work(t: int) -> None:
        for _ in range(10):
            np.testing.assert_allclose(
                exes[t % 2](x, params=params[t % 2]), want[t % 2], rtol=2e-4, atol=2e-5
            )

    _in_threads(work, 4)
