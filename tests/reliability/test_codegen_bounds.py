"""Issue 10, finding 1 (kernels): no generated kernel reads or writes outside its arrays at
tails (sizes 1, 7, 13, 301: not multiples of the vector width or the tiles).

On a host-memory device (PoCL) kernels read the caller's inputs and parameters and write the
``out=`` arrays in place, so each array is placed against a ``PROT_NONE`` guard page, once
ending at it (a read past the end of a row faults) and once starting after it (a read before
the start faults); parameters (weights, embedding tables) likewise. The models run in a
subprocess: a fault fails the test with the model's name instead of killing pytest."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap

import pytest

pytest.importorskip("pyopencl")

pytestmark = pytest.mark.opencl

SCRIPT = textwrap.dedent("""
    import ctypes, mmap, sys
    import numpy as np
    import ncd
    from ncd import nn, ops
    from ncd.axis import Axis
    from ncd_opencl.backend import OpenCLExecutable

    libc = ctypes.CDLL(None)
    PAGE = mmap.PAGESIZE
    KEEP = []

    def guarded(shape, dtype, at_end):
        n = int(np.prod(shape)) if shape else 1
        nbytes = n * np.dtype(dtype).itemsize
        pages = -(-nbytes // PAGE) + 2
        m = mmap.mmap(-1, pages * PAGE)
        base = ctypes.addressof(ctypes.c_char.from_buffer(m))
        guard = base + (pages - 1) * PAGE if at_end else base
        assert libc.mprotect(ctypes.c_void_p(guard), PAGE, 0) == 0
        off = (pages - 1) * PAGE - nbytes if at_end else PAGE
        KEEP.append(m)
        return np.frombuffer(m, dtype=dtype, count=n, offset=off).reshape(shape)

    def side(models):
        out = models[0]
        for m in models[1:]:
            out = out @ m
        return out

    def ax(name, n):
        return Axis(name, size=n)

    S = (1, 7, 13, 301)
    MODELS = {
        "softmax": lambda: side([ops.softmax(ax("x", n)).over(ax("r", 3)) for n in S]),
        "layernorm": lambda: side([ops.layernorm(ax("x", n)).over(ax("r", 3)) for n in S]),
        "rmsnorm_l2norm": lambda: side([(ops.rmsnorm(ax("x", n)) >> ops.l2norm(ax("x", n)))
                                        .over(ax("r", 3)) for n in S]),
        "gelu": lambda: side([ops.unary("gelu").over(ax("r", 3), ax("c", n)) for n in S]),
        "add_broadcast": lambda: side([ops.add().over(ax("r", 3), ax("c", n)) for n in S]),
        "reduce_max": lambda: side([ops.reduce("max", ax("c", n)).over(ax("r", 5)) for n in S]),
        "linear_tiled": lambda: side([ops.linear("d -> e").over(ax("s", n)).bind(d=16, e=n)
                                      for n in S]),
        "linear_odd": lambda: side([ops.linear("d -> e").over(ax("s", 7)).bind(d=n, e=13)
                                    for n in S]),
        "attention": lambda: side([nn.attention(causal=True).over("h").bind(h=2, q=n, x=n, d=8, v=8)
                                   for n in (1, 7, 13, 67)]),
        "attention_vector": lambda: nn.attention().over("h").bind(h=1, q=13, x=301, d=16, v=16),
        "spherical": lambda: nn.spherical_attention().bind(q=7, x=13, d=5, v=3),
        "embedding": lambda: side([ops.embedding("vocab -> d", vocab=11, d=n).over(ax("s", 13))
                                   for n in S]),
        "einsum": lambda: side([ops.einsum("a b, b c -> a c", a=n, b=13, c=7) for n in S]),
        "rearrange": lambda: ops.rearrange("a b c -> (c a) b", a=3, b=7, c=13),
        "mlp": lambda: nn.mlp().over("s").bind(s=7, d_model=16, d_ff=13),
    }
    MATMUL = {"linear_tiled", "linear_odd", "mlp"}  # the other matmul templates too
    for name, make in MODELS.items():
        model = make()
        opts = [{}, {"local_memory": True}, {"tiled": False}] if name in MATMUL else [{}]
        exes = [OpenCLExecutable(model, **o) for o in opts]
        g = model.graph
        params = ncd.init(model, seed=0)
        rng = np.random.default_rng(0)
        for at_end in (True, False):
            xs = []
            for v in g.inputs:
                dt = np.int64 if g.values[v].dtype == "int64" else np.float32
                x = guarded(g.shape(v), dt, at_end)
                x[...] = (rng.integers(0, 11, x.shape) if dt == np.int64
                          else rng.standard_normal(x.shape))
                xs.append(x)
            ps = {}
            for k, arr in params.items():  # weights and tables are read in place too
                ps[k] = guarded(arr.shape, np.float32, at_end)
                ps[k][...] = arr
            want = ncd.run(model, *xs, params=ps)
            want = list(want) if isinstance(want, tuple) else [want]
            for o, exe in zip(opts, exes):
                outs = [guarded(g.shape(v), np.float32, at_end) for v in g.outputs]
                print(name, "end" if at_end else "start", o, flush=True)
                exe(*xs, params=ps, out=tuple(outs))
                for k, (got, w) in enumerate(zip(outs, want)):
                    np.testing.assert_allclose(got, w, rtol=1e-4, atol=1e-5,
                                               err_msg=f"{name}[{k}] {o}")
    print("all in bounds")
""")


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="mprotect guard pages")
def test_no_kernel_touches_memory_outside_its_arrays() -> None:
    proc = subprocess.run(
        [sys.executable, "-c", SCRIPT],
        capture_output=True,
        text=True,
        timeout=300,
        env={**os.environ, "PYTHONWARNINGS": "ignore"},
    )
    last = proc.stdout.strip().splitlines()[-1:] or ["(nothing ran)"]
    assert proc.returncode == 0, (
        f"exit {proc.returncode} (-11: an out-of-bounds access) while running {last[0]}\n"
        f"{proc.stderr[-3000:]}"
    )
    assert last[0] == "all in bounds"
