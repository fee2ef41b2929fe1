"""Build, lower and verify GPTs of 6-48 layers: time should grow linearly (target: 48 layers < 2 s).
Then, with ncd-opencl installed, plan (``ncd.plan(target="opencl")``), generate (render that
plan) and build (PoCL, disk cache off) GPTs of 6-192 layers: each per layer should stay flat.

Run: python benchmarks/core_build.py
"""

from __future__ import annotations

import os
import time

import ncd


def main() -> None:
    print(
        f"{'layers':>6} {'nodes':>6} {'build+lower s':>14} {'bind s':>8} {'verify s':>9} "
        f"{'json s':>8} {'per layer ms':>13}"
    )
    for layers in (6, 12, 24, 48):
        t0 = time.perf_counter()
        gpt = ncd.nn.gpt(layers=layers)
        graph = gpt.graph
        t1 = time.perf_counter()
        bound = gpt.bind(seq=1024, d_model=768, heads=12, d_head=64, d_ff=3072, vocab=50257)
        t2 = time.perf_counter()
        bound.graph.verify()
        t3 = time.perf_counter()
        ncd.from_json(ncd.to_json(bound))
        t4 = time.perf_counter()
        print(
            f"{layers:>6} {len(graph.nodes):>6} {t1 - t0:>14.3f} {t2 - t1:>8.3f} {t3 - t2:>9.3f} "
            f"{t4 - t3:>8.3f} {1e3 * (t1 - t0) / layers:>13.1f}"
        )


def opencl_rows() -> None:
    """plan + generate + build per layer (small sizes: the point is the depth)."""
    try:
        from ncd_opencl.generate import generate
        from ncd_opencl.program import build, default_options
    except ImportError:
        print("(ncd-opencl not installed: no plan/generate/build rows)")
        return
    os.environ["NCD_OPENCL_CACHE_MB"] = "0"  # a cold build each time (distinct sources)
    print(
        f"\n{'layers':>6} {'kernels':>8} {'plan s':>8} {'generate s':>11} {'build s':>8} "
        f"{'plan ms/L':>10} {'gen ms/L':>9} {'build ms/L':>11}"
    )
    for layers in (6, 12, 24, 48, 96, 192):
        gpt = ncd.nn.gpt(layers=layers).bind(
            seq=64, d_model=64, heads=4, d_head=16, d_ff=128, vocab=97
        )
        graph = gpt.graph
        t0 = time.perf_counter()
        plan = ncd.plan(graph, target="opencl")
        t1 = time.perf_counter()
        gen = generate(graph, plan=plan)
        t2 = time.perf_counter()
        build(gen.source, None, default_options())
        t3 = time.perf_counter()
        print(
            f"{layers:>6} {len(plan.kernels):>8} {t1 - t0:>8.3f} {t2 - t1:>11.3f} {t3 - t2:>8.3f} "
            f"{1e3 * (t1 - t0) / layers:>10.1f} {1e3 * (t2 - t1) / layers:>9.1f} "
            f"{1e3 * (t3 - t2) / layers:>11.1f}"
        )


if __name__ == "__main__":
    main()
    opencl_rows()
