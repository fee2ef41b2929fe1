"""Perf-model evaluation of a 48-layer GPT at seq 8192 takes seconds.

Prints, side by side, the time each stage takes (building the model, planning fusion, pricing
the plan on each machine) and the model's predicted time, traffic and bottleneck per machine.
Run: /work/venv/bin/python benchmarks/perf_gpt48.py
"""

from __future__ import annotations

import time

import ncd
import ncd_perf

SIZES = dict(seq=8192, d_model=1600, heads=25, d_head=64, d_ff=6400, vocab=50257)  # GPT-2 XL widths


def main() -> None:
    t0 = time.perf_counter()
    model = ncd.nn.gpt(layers=48).bind(**SIZES)
    graph = model.graph
    t1 = time.perf_counter()
    plan = ncd.fuse(graph)
    t2 = time.perf_counter()
    print(f"48-layer GPT, {SIZES}: {len(graph.nodes)} ops -> {len(plan.kernels)} kernels")
    print(f"{'stage':<28} {'seconds':>8}")
    print(f"{'build + lower the model':<28} {t1 - t0:>8.2f}")
    print(f"{'fusion plan':<28} {t2 - t1:>8.2f}")
    rows = []
    for name in ("h100", "h200", "a100", "cpu", "host"):
        t = time.perf_counter()
        cost = ncd_perf.cost(graph, name, plan=plan)
        dt = time.perf_counter() - t
        print(f"{'price on ' + name:<28} {dt:>8.2f}")
        moved = float(cost.transfers_at(1, "bytes"))
        worst = max(cost.kernels, key=lambda k: k.time or 0.0)
        rows.append((name, cost.time, moved, worst.kernel.name, worst.bottleneck))
    print(f"{'total':<28} {time.perf_counter() - t0:>8.2f}")
    print()
    base = rows[0][1]
    print(
        f"{'machine':<8} {'predicted':>11} {'vs h100':>8} {'HBM/DRAM traffic':>17}  "
        "slowest kernel (bottleneck)"
    )
    for name, t, moved, kname, bott in rows:
        print(
            f"{name:<8} {t * 1e3:>9.1f}ms {t / base:>7.2f}x {moved / 1e9:>15.1f}GB  "
            f"{kname} ({bott})"
        )
    bf16 = ncd_perf.cost(graph, "h100", plan=plan, dtype="bfloat16")
    print(
        f"\nbfloat16 on h100: {bf16.time * 1e3:.1f} ms "
        f"({base / bf16.time:.2f}x faster than float32)"
    )


if __name__ == "__main__":
    main()
