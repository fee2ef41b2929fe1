"""How well ncd-perf predicts: priced against measured, in one run.

1. This host: every workload of ``benchmarks/opencl_bench.py``, planned once with
   ``ncd.plan(model, target="opencl")``; that plan is priced on the machine ``"host"``
   (detected and calibrated, ``ncd calibrate``) and compiled and timed with ncd-opencl
   (best of ``--reps`` calls after a warm-up: the cores are shared, the best is the least
   disturbed). The host's cached calibration prices every row (``--refresh`` measures it
   again first); ``--calibrate each`` calibrates again right before each workload, so that
   the microbenchmarks and the workload meet the same load from other processes.
2. Published GPU figures: FlashAttention-2 and -3 forward on an H100 SXM5 (bfloat16, head dim
   128, causal and not), priced on the machine ``"h100"`` with the plan ncd-cuda renders.

Each row prints predicted / measured; a row is "within 25%" when that ratio is in [0.8, 1.25].

    python benchmarks/perf_fidelity.py            # the bench's sizes (a few minutes on 2 cores)
    python benchmarks/perf_fidelity.py --quick    # small sizes
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from typing import Any

import numpy as np

import ncd
import ncd_perf
from ncd import nn

sys.path.insert(0, os.path.dirname(__file__))
from opencl_bench import workloads  # the same workloads, built the same way

#: FlashAttention-3 (Shah et al. 2024, arXiv 2407.08608), Figure 5, H100 80GB SXM5, forward,
#: bfloat16/fp16, head dim 128, batch x seq = 16k tokens, 2048 hidden (16 heads): TFLOPS/s
#: read from the bar labels, (FlashAttention-2, FlashAttention-3). FLOPs are counted as
#: 4 seq^2 d heads batch, halved for causal.
PUBLISHED = {
    (False, 2048): (362, 625),
    (False, 8192): (370, 646),
    (False, 16384): (370, 648),
    (True, 2048): (298, 521),
    (True, 8192): (333, 602),
    (True, 16384): (335, 616),
}


def _best(fn: Any, reps: int) -> float:
    fn()  # warm-up: first-touch pages, the JIT
    best = float("inf")
    for _ in range(reps):
        t0 = time.perf_counter()
        fn()
        best = min(best, time.perf_counter() - t0)
    return best


def within(ratio: float) -> bool:
    return 0.8 <= ratio <= 1.25


def host_rows(quick: bool, reps: int, only: str, each: bool) -> list[dict[str, Any]]:
    rows = []
    for name, model, make in workloads(quick):
        if only and only not in name:
            continue
        if each:  # the same microbenchmarks, under the load this workload will meet
            ncd_perf.calibrate(refresh=True)
        plan = ncd.plan(model, target="opencl")
        priced = ncd_perf.cost(model, "host", plan=plan)
        roofline = ncd_perf.cost(model, "host", plan=plan, overlap="max").time
        exe = ncd.compile(model, "opencl", plan=plan)
        xs = make(model)
        params = ncd.init(model, seed=0)
        got = exe(*xs, params=params)
        keep = got.copy() if isinstance(got, np.ndarray) else tuple(g.copy() for g in got)
        measured = _best(lambda exe=exe, xs=xs, p=params, k=keep: exe(*xs, params=p, out=k), reps)
        slowest = max(priced.kernels, key=lambda k: k.time or 0.0)
        rows.append(
            {
                "workload": name,
                "kernels": len(plan.kernels),
                "predicted": priced.time,
                "measured": measured,
                "max": roofline,
                "bound": f"{slowest.kernel.name}: {slowest.bottleneck}",
            }
        )
        print(_row(rows[-1]), flush=True)
    return rows


def gpu_rows() -> list[dict[str, Any]]:
    rows = []
    for (causal, seq), (fa2, fa3) in PUBLISHED.items():
        heads, batch, d = 16, 16384 // seq, 128
        att = nn.attention(causal=causal).over("h").over("b")
        model = att.bind(b=batch, h=heads, q=seq, x=seq, d=d, v=d).cast(ncd.bfloat16)
        plan = ncd.plan(model, target="cuda")
        t = ncd_perf.cost(model, "h100", plan=plan).time
        assert t is not None
        flops = 4 * seq * seq * d * heads * batch / (2 if causal else 1)
        for who, tflops in (("FA2", fa2), ("FA3", fa3)):
            rows.append(
                {
                    "workload": f"{who} {'causal' if causal else 'full'} seq {seq} d {d}",
                    "kernels": len(plan.kernels),
                    "predicted": t,
                    "measured": flops / (tflops * 1e12),
                    "bound": ncd_perf.cost(model, "h100", plan=plan).kernels[0].bottleneck,
                }
            )
    return rows


def _ms(t: float) -> str:
    return f"{t * 1e3:.3f} ms" if t < 0.01 else f"{t * 1e3:.1f} ms"


def _row(r: dict[str, Any]) -> str:
    ratio = r["predicted"] / r["measured"]
    mark = "yes" if within(ratio) else "no"
    cells = [r["workload"], str(r["kernels"]), _ms(r["predicted"]), _ms(r["measured"])]
    cells += [f"{ratio:.2f}", mark]
    if "max" in r:  # the same plan under overlap="max", for comparison
        cells.append(f"{r['max'] / r['measured']:.2f}")
    return "| " + " | ".join([*cells, r["bound"]]) + " |"


def table(title: str, rows: list[dict[str, Any]], measured: str) -> str:
    cols = ["workload", "kernels", "predicted", measured, "predicted/measured", "within 25%"]
    if rows and "max" in rows[0]:
        cols.append("with overlap=max")
    cols.append("bound")
    head = "| " + " | ".join(cols) + " |"
    lines = [f"### {title}", "", head, "|" + "---|" * len(cols), *(_row(r) for r in rows)]
    hits = sum(within(r["predicted"] / r["measured"]) for r in rows)
    lines += ["", f"{hits} of {len(rows)} rows within 25%"]
    if rows and "max" in rows[0]:
        alt = sum(within(r["max"] / r["measured"]) for r in rows)
        lines.append(f"({alt} of {len(rows)} with overlap=max)")
    return "\n".join(lines)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--reps", type=int, default=5)
    ap.add_argument("--only", default="", help="substring of workload names to run")
    ap.add_argument("--refresh", action="store_true", help="calibrate the host again first")
    ap.add_argument("--no-gpu", action="store_true", help="skip the published GPU rows")
    ap.add_argument(
        "--calibrate",
        choices=["each", "once"],
        default="once",
        help="calibrate the host once (the cached calibration; --refresh measures it again) "
        "or before each workload (each: the same load as the workload meets)",
    )
    args = ap.parse_args()
    cal = ncd_perf.calibrate(args.refresh)
    print(cal.describe(), "\n", flush=True)
    rows = host_rows(args.quick, args.reps, args.only, args.calibrate == "each")
    print()
    print(table("this host: ncd-opencl (PoCL), predicted on 'host'", rows, "measured"))
    if not args.no_gpu:
        print()
        print(table("H100 SXM5: published FlashAttention", gpu_rows(), "published"))


if __name__ == "__main__":
    main()
