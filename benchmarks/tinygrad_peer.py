"""tinygrad on the same PoCL device: the peer docs/opencl.md compares ncd-opencl with.

Benchmark-only, never a dependency: run it from its own virtual environment holding
``tinygrad`` and ``pyopencl[pocl]`` (PERF-NOTES.md explains the loader variables), e.g.

    python -m venv /tmp/tg && /tmp/tg/bin/pip install tinygrad "pyopencl[pocl]" numpy
    /tmp/tg/bin/python benchmarks/tinygrad_peer.py [--vendors DIR]

``--vendors`` points the OpenCL loader at a folder with an ``.icd`` file: on CPUs PoCL's LLVM
does not know (Zen 5), the patched PoCL that ncd-opencl writes under ~/.cache/ncd-opencl.
Workloads and sizes match benchmarks/opencl_bench.py; times are medians after two warm-ups,
the first call (tinygrad's compile) shown apart.
"""

from __future__ import annotations

import argparse
import glob
import os
import statistics
import sys
import time


def _environment(vendors: str | None) -> None:
    import importlib.util

    spec = importlib.util.find_spec("pyopencl")
    if spec is None or spec.origin is None:
        sys.exit("pyopencl is not installed in this environment")
    pkg = os.path.dirname(spec.origin)
    libs = os.path.join(pkg, ".libs")
    os.environ.setdefault("OCL_ICD_VENDORS", (vendors or libs).rstrip("/") + "/")
    os.environ.setdefault("LD_LIBRARY_PATH", libs)
    os.environ.setdefault("OPENCL_PATH", glob.glob(os.path.join(libs, "libOpenCL-*.so*"))[0])
    os.environ.setdefault("PYOPENCL_HOME", pkg)
    os.environ.setdefault("DEV", "CL")


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--vendors", help="folder holding the OpenCL .icd file to use")
    ap.add_argument("--reps", type=int, default=3)
    args = ap.parse_args()
    _environment(args.vendors)
    import numpy as np
    from tinygrad import Device, Tensor, nn

    def done(t: Tensor) -> None:  # realize() only enqueues on an OpenCL device
        t.realize()
        Device[Device.DEFAULT].synchronize()

    rng = np.random.default_rng(0)

    class Block:
        def __init__(self, d: int, heads: int, ff: int) -> None:
            self.heads = heads
            self.ln1, self.ln2 = nn.LayerNorm(d), nn.LayerNorm(d)
            self.q, self.k, self.v, self.o = (nn.Linear(d, d) for _ in range(4))
            self.fc, self.proj = nn.Linear(d, ff), nn.Linear(ff, d)

        def __call__(self, x: Tensor) -> Tensor:
            b, s, d = x.shape
            h = self.ln1(x)
            q, k, v = (
                f(h).reshape(b, s, self.heads, d // self.heads).transpose(1, 2)
                for f in (self.q, self.k, self.v)
            )
            a = q.scaled_dot_product_attention(k, v, is_causal=True)
            x = x + self.o(a.transpose(1, 2).reshape(b, s, d))
            return x + self.proj(self.fc(self.ln2(x)).gelu())

    def normal(*shape: int) -> Tensor:
        return Tensor(rng.standard_normal(shape).astype(np.float32)).realize()

    # tinygrad hash-conses lazy graphs: the same ops on the same realised input would return
    # the already computed buffer, so every timed call gets an input of its own
    n = args.reps + 2
    work = [
        ("softmax 4096x4096", [normal(4096, 4096) for _ in range(n)], lambda x: x.softmax(-1)),
        ("layernorm 8192x1024", [normal(8192, 1024) for _ in range(n)], lambda x: x.layernorm(-1)),
        (
            "attention 8x2048x64",
            [normal(8, 2048, 64) for _ in range(n)],
            lambda x: x.scaled_dot_product_attention(x * 0.5, x * 0.25),
        ),
    ]
    block = Block(512, 8, 2048)
    work.append(("transformer x1 b4 s512 d512", [normal(4, 512, 512) for _ in range(n)], block))

    print(f"tinygrad on {Device.DEFAULT}")
    print("| workload | tinygrad | tinygrad first |")
    print("|---|---|---|")
    for name, inputs, fn in work:
        t0 = time.perf_counter()
        done(fn(inputs[0]))
        first = time.perf_counter() - t0
        done(fn(inputs[1]))
        ts = []
        for x in inputs[2:]:
            t0 = time.perf_counter()
            done(fn(x))
            ts.append(time.perf_counter() - t0)
        print(f"| {name} | {statistics.median(ts) * 1e3:.1f} ms | {first:.1f} s |", flush=True)


if __name__ == "__main__":
    main()
