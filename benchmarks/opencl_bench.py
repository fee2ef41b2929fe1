"""ncd-opencl against its peers on this machine: one table per run, peers side by side.

Peers: NumPy (the reference interpreter's ops, vectorised by NumPy/OpenBLAS), torch eager and
torch.compile of the *same* model exported by ncd-torch (same parameters), with torch.compile's
first call (its compile time) shown separately. "ncd out=" writes into the same output arrays
on every call; "ncd" takes its outputs from the executable's pool (each call's result is
dropped, so the pool reuses it: no page faults of a new output either). ncd's first call
includes planning, code generation and the OpenCL build. Both start cold (fresh program, PoCL and
inductor caches) unless --warm; within one run, workloads whose kernels were already built
(deeper transformers share their layers' kernels with shallower ones) hit ncd's in-memory
program cache. The last
two ratio columns divide ncd by torch.compile: steady forward, and the seeds' measure (first
call + 10 forwards).
tinygrad runs from its own virtual environment: benchmarks/tinygrad_peer.py prints the same
workloads on the same PoCL device.

    python benchmarks/opencl_bench.py            # the issue's sizes (minutes on 2 cores)
    python benchmarks/opencl_bench.py --quick    # small sizes, seconds
    python benchmarks/opencl_bench.py --dtype bfloat16   # every model cast (model.cast), inputs
                                                         # and torch peers in that format too
    python benchmarks/opencl_bench.py --tune 60  # plus ncd.tune (60 s budget each): tuned rows
"""

from __future__ import annotations

import argparse
import os
import statistics
import tempfile
import time
from collections.abc import Callable
from typing import Any

import numpy as np

import ncd
from ncd import nn, ops


def _median(fn: Callable[[], Any], reps: int, warmup: int = 2) -> float:
    # warm-up calls: the process's first large allocations fault in huge pages slowly (this
    # VM compacts memory on demand), for every peer alike
    for _ in range(warmup):
        fn()
    ts = []
    for _ in range(reps):
        t0 = time.perf_counter()
        fn()
        ts.append(time.perf_counter() - t0)
    return statistics.median(ts)


def workloads(quick: bool) -> list[tuple[str, Any, Callable[[Any], list[np.ndarray]]]]:
    s = 8 if quick else 1
    rng = np.random.default_rng(0)

    def normal(*shape: int) -> np.ndarray:
        return rng.standard_normal(shape).astype(np.float32)

    out: list[tuple[str, Any, Callable[[Any], list[np.ndarray]]]] = []
    r, c = 4096 // s, 4096 // s
    out.append(
        (
            f"softmax {r}x{c}",
            ops.softmax(ncd.Axis("x", size=c)).over(ncd.Axis("r", size=r)),
            lambda m, r=r, c=c: [normal(r, c)],
        )
    )
    r, d = 8192 // s, 1024 // s
    out.append(
        (
            f"layernorm {r}x{d}",
            ops.layernorm(ncd.Axis("d", size=d)).over(ncd.Axis("r", size=r)),
            lambda m, r=r, d=d: [normal(r, d)],
        )
    )
    n, d, f = 2048 // s, 1024 // s, 4096 // s
    out.append(
        (
            f"MLP {n}x{d}->{f}->{d} gelu",
            nn.mlp().over("s").bind(s=n, d_model=d, d_ff=f),
            lambda m, n=n, d=d: [normal(n, d)],
        )
    )
    for seq in (512, 1024, 2048) if not quick else (128,):
        att = nn.attention().over("h").bind(h=8, q=seq, x=seq, d=64, v=64)
        out.append(
            (
                f"attention 8x{seq}x64",
                att,
                lambda m, seq=seq: [normal(8, seq, 64), normal(8, seq, 64), normal(8, seq, 64)],
            )
        )
    seq, batch = (512, 4) if not quick else (64, 2)
    dm, ff = (512, 2048) if not quick else (128, 512)
    for layers in (1, 2, 3, 4):
        ax = {n: ncd.Axis(n) for n in ("seq", "d_model", "heads", "d_head", "d_ff", "seq_k")}
        blocks = [
            nn.transformer_block(
                ax["seq"],
                ax["d_model"],
                ax["heads"],
                ax["d_head"],
                ax["d_ff"],
                seq_k=ax["seq_k"],
                label=f"blocks.{i}",
            )
            for i in range(layers)
        ]
        model = blocks[0]
        for b in blocks[1:]:
            model = model >> b
        model = model.over("batch").bind(
            batch=batch, seq=seq, d_model=dm, heads=8, d_head=dm // 8, d_ff=ff
        )
        out.append(
            (
                f"transformer x{layers} b{batch} s{seq} d{dm}",
                model,
                lambda m, seq=seq, batch=batch, dm=dm: [normal(batch, seq, dm)],
            )
        )
    return out


def bench(
    name: str,
    model: Any,
    make: Callable[[Any], list[np.ndarray]],
    reps: int,
    peers: bool,
    unfused: bool = False,
    dtype: str = "float32",
    tune: float | None = None,
) -> dict[str, Any]:
    if dtype != "float32":  # the model, its inputs and parameters in one format
        model = model.cast(ncd.dtype(dtype))
    xs = [x.astype(ncd.dtype(dtype).numpy) for x in make(model)]
    params = ncd.init(model, seed=0)
    row: dict[str, Any] = {"workload": name}
    t0 = time.perf_counter()
    exe = ncd.compile(model, "opencl")
    got = exe(*xs, params=params)
    row["ncd first"] = time.perf_counter() - t0
    row["ncd"] = _median(lambda: exe(*xs, params=params), reps)
    keep = got.copy() if isinstance(got, np.ndarray) else tuple(g.copy() for g in got)
    row["ncd out="] = _median(lambda: exe(*xs, params=params, out=keep), reps)
    graph = ncd.reference.prepare(model, xs, params)[0]
    row["kernels"] = len(exe.compiled(graph).gen.kernels)
    want = ncd.run(model, *xs, params=params)
    row["max err"] = float(
        np.max(np.abs(np.asarray(got, np.float64) - np.asarray(want, np.float64)))
    )
    row["numpy"] = _median(lambda: ncd.run(model, *xs, params=params), max(1, reps // 2))
    if tune is not None:  # ncd.tune with this budget (cold tuning cache unless --warm)
        t0 = time.perf_counter()
        report = ncd.tune(model, "opencl", budget=tune, inputs=xs, params=params)
        row["tune"] = time.perf_counter() - t0
        t0 = time.perf_counter()
        tuned = ncd.compile(model, "opencl", plan=report.plan)
        tuned(*xs, params=params)
        row["tuned first"] = time.perf_counter() - t0
        row["ncd tuned"] = _median(lambda: tuned(*xs, params=params), reps)
        row["tuned picks"] = sum(g.winner != g.default for g in report.groups)
    if unfused:  # the same model with one kernel per op (every intermediate in memory)
        plain = ncd.compile(model, "opencl", fuse=False)
        plain(*xs, params=params)
        row["ncd unfused"] = _median(lambda: plain(*xs, params=params), reps)
    if peers:
        import torch

        from ncd_torch import state_dict
        from ncd_torch._dtypes import to_tensor

        torch.set_num_threads(os.cpu_count() or 1)
        mod = ncd.export(model, "torch")  # a cast model exports in its format
        mod.load_state_dict(state_dict(params))
        txs = [to_tensor(x) for x in xs]
        with torch.no_grad():
            row["torch eager"] = _median(lambda: mod(*txs), reps)
            cmod = torch.compile(mod)
            t0 = time.perf_counter()
            cmod(*txs)
            row["torch.compile first"] = time.perf_counter() - t0
            row["torch.compile"] = _median(lambda: cmod(*txs), reps)
    return row


def table(rows: list[dict[str, Any]]) -> str:
    cols = [
        "workload",
        "kernels",
        "ncd",
        "ncd out=",
        "ncd first",
        "ncd unfused",
        "numpy",
        "torch eager",
        "torch.compile",
        "torch.compile first",
        "ncd/tc",
        "10 fwd+compile ncd/tc",
        "max err",
    ]
    if any("ncd tuned" in r for r in rows):
        cols[4:4] = ["ncd tuned", "tune"]
        cols[-1:-1] = ["tuned/tc", "tune+10 fwd tuned/tc"]
    lines = ["| " + " | ".join(cols) + " |", "|" + "---|" * len(cols)]
    for r in rows:
        tc, tcf = r.get("torch.compile"), r.get("torch.compile first")
        ratio = f"{r['ncd'] / tc:.2f}" if tc else "-"
        e2e = f"{(r['ncd first'] + 10 * r['ncd']) / (tcf + 10 * tc):.2f}" if tc and tcf else "-"

        def ms(k: str) -> str:
            v = r.get(k)
            return "-" if v is None else (f"{v * 1e3:.1f} ms" if v < 10 else f"{v:.1f} s")

        timed = [ms(c) for c in cols[2 : cols.index("ncd/tc")]]
        extra = []
        if "tuned/tc" in cols:
            tn = r.get("ncd tuned")
            extra.append(f"{tn / tc:.2f}" if tc and tn else "-")
            cold = tn and r["tune"] + r["tuned first"] + 10 * tn
            extra.append(f"{cold / (tcf + 10 * tc):.2f}" if tc and tcf and cold else "-")
        cells = [r["workload"], str(r["kernels"]), *timed, ratio, e2e, *extra]
        cells.append(f"{r['max err']:.1e}")
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--reps", type=int, default=5)
    ap.add_argument("--only", default="", help="substring of workload names to run")
    ap.add_argument("--no-peers", action="store_true")
    ap.add_argument("--unfused", action="store_true", help="also time one kernel per op")
    ap.add_argument("--warm", action="store_true", help="keep the on-disk program cache")
    ap.add_argument(
        "--dtype",
        default="float32",
        choices=["float32", "bfloat16", "float16", "float64"],
        help="cast every model (and its inputs, parameters and torch peers) to this format",
    )
    ap.add_argument(
        "--tune",
        type=float,
        metavar="SECONDS",
        help="also run ncd.tune with this budget per workload: tuned rows and the tuning time",
    )
    args = ap.parse_args()
    if not args.warm:  # both compilers start cold: no program cache, no inductor cache
        os.environ["NCD_TUNING_CACHE"] = tempfile.mkdtemp(prefix="ncd-tuning-bench-")
        os.environ["NCD_OPENCL_CACHE"] = tempfile.mkdtemp(prefix="ncd-opencl-bench-")
        os.environ["TORCHINDUCTOR_CACHE_DIR"] = tempfile.mkdtemp(prefix="inductor-bench-")
        os.environ["POCL_CACHE_DIR"] = tempfile.mkdtemp(prefix="pocl-bench-")  # PoCL's JIT cache
    rows = []
    for name, model, make in workloads(args.quick):
        if args.only and args.only not in name:
            continue
        rows.append(
            bench(
                name, model, make, args.reps, not args.no_peers, args.unfused, args.dtype, args.tune
            )
        )
        print(f"  done: {name}", flush=True)
    print(f"format: {args.dtype}")
    print(table(rows))


if __name__ == "__main__":
    main()
