"""Build, lower and verify GPTs of 6-48 layers: time should grow linearly (target: 48 layers < 2 s).

Run: python benchmarks/core_build.py
"""

from __future__ import annotations

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


if __name__ == "__main__":
    main()
