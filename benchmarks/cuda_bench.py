"""ncd-cuda against torch on this GPU: each workload's kernels timed with CUDA events, beside
torch's own (cuBLAS matmuls, SDPA's FlashAttention, its layernorm and softmax), and beside
ncd-perf's prediction for the plan that runs, ratios in one table.

    python benchmarks/cuda_bench.py              # H100/H200-sized workloads (about a minute)
    python benchmarks/cuda_bench.py --quick      # small sizes
    python benchmarks/cuda_bench.py --emulator   # tiny sizes on the host emulator: checks this
                                                 # script and the outputs, times nothing useful

Both sides get device tensors (torch CUDA tensors, bfloat16 handed to ncd as its 16 bits) and
write into preallocated outputs, so neither pays a transfer or an allocation; parameters are
device tensors too. float32 matmuls run without TF32 on both sides
(``torch.backends.cuda.matmul.allow_tf32 = False``: ncd's CUDA-core matmul is exact IEEE).
``ncd first`` is the first call: NVRTC compilation of the kernels plus the launch.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from collections.abc import Callable
from typing import Any

import numpy as np

import ncd
from ncd import nn, ops


def workloads(scale: int) -> list[tuple[str, Any, str]]:
    """(name, model, torch peer kind) at sizes divided by ``scale``."""
    n = 4096 // scale
    s, heads = 4096 // scale, 16
    rows, d = 8192 // scale, 4096 // scale
    bf16 = ncd.bfloat16
    out: list[tuple[str, Any, str]] = [
        (f"matmul f32 {n}^3", ops.einsum("a b, b c -> a c").bind(a=n, b=n, c=n), "matmul"),
        (
            f"matmul bf16 {n}^3",
            ops.einsum("a b, b c -> a c").bind(a=n, b=n, c=n).cast(bf16),
            "matmul",
        ),
    ]
    for causal in (False, True):
        att = nn.attention(causal=causal).over("h").bind(h=heads, q=s, x=s, d=128, v=128)
        kind = "causal" if causal else "full"
        out.append((f"attention bf16 h{heads} s{s} d128 {kind}", att.cast(bf16), f"sdpa-{kind}"))
    out.append(
        (
            f"layernorm bf16 {rows}x{d}",
            ops.layernorm("d").over("r").bind(r=rows, d=d).cast(bf16),
            "layernorm",
        )
    )
    out.append((f"softmax f32 {rows}x{d}", ops.softmax("x").over("r").bind(r=rows, x=d), "softmax"))
    return out


def _median_cuda(torch: Any, fn: Callable[[], Any], reps: int) -> float:
    for _ in range(3):
        fn()
    torch.cuda.synchronize()
    times = []
    for _ in range(reps):
        start = torch.cuda.Event(enable_timing=True)
        end = torch.cuda.Event(enable_timing=True)
        start.record()
        fn()
        end.record()
        end.synchronize()
        times.append(start.elapsed_time(end) / 1e3)
    return statistics.median(times)


def _peer(torch: Any, kind: str, xs: list[Any], params: dict[str, Any]) -> Callable[[], Any]:
    F = torch.nn.functional
    if kind == "matmul":
        a, b = xs
        return lambda: a @ b
    if kind.startswith("sdpa"):
        q, k, v = (x.unsqueeze(0) for x in xs)  # (1, heads, seq, d)
        causal = kind.endswith("causal")
        return lambda: F.scaled_dot_product_attention(q, k, v, is_causal=causal)
    if kind == "layernorm":
        (x,) = xs
        w, b = params["layernorm.weight"], params["layernorm.bias"]
        return lambda: F.layer_norm(x, (x.shape[-1],), w, b)
    (x,) = xs
    return lambda: torch.softmax(x, dim=-1)


def _as_ncd(torch: Any, t: Any) -> Any:
    """A torch CUDA tensor as ncd-cuda takes it (bfloat16 as its 16 bits)."""
    return t.view(torch.int16) if t.dtype == torch.bfloat16 else t


def _predicted(model: Any) -> float | None:
    try:
        import ncd_perf

        plan = ncd.plan(model, target="cuda")
        return float(ncd_perf.cost(model, "h200", plan=plan).time)
    except Exception:  # ncd-perf is optional here: the column then shows "-"
        return None


def bench_gpu(name: str, model: Any, kind: str, reps: int) -> dict[str, Any]:
    import torch

    def to_tensor(x: np.ndarray) -> Any:  # bfloat16 through its bits (ml_dtypes -> torch)
        if x.dtype == ncd.bfloat16.numpy:
            return torch.from_numpy(x.view(np.int16)).view(torch.bfloat16)
        return torch.from_numpy(np.ascontiguousarray(x))

    torch.backends.cuda.matmul.allow_tf32 = False
    g = model.graph
    rng = np.random.default_rng(0)
    host = [
        rng.standard_normal(g.shape(v)).astype(g.values[v].dtype.numpy, copy=False)
        for v in g.inputs
    ]
    xs = [to_tensor(x).cuda() for x in host]
    params_np = ncd.init(model, seed=0)
    params = {k: to_tensor(p).cuda() for k, p in params_np.items()}
    (out_v,) = g.outputs
    out = torch.empty(g.shape(out_v), dtype=xs[0].dtype, device="cuda")
    exe = ncd.compile(model, "cuda")
    ncd_xs = [_as_ncd(torch, x) for x in xs]
    ncd_ps = {k: _as_ncd(torch, p) for k, p in params.items()}
    t0 = time.perf_counter()
    exe(*ncd_xs, params=ncd_ps, out=_as_ncd(torch, out))
    torch.cuda.synchronize()
    first = time.perf_counter() - t0
    ours = _median_cuda(torch, lambda: exe(*ncd_xs, params=ncd_ps, out=_as_ncd(torch, out)), reps)
    peer = _peer(torch, kind, xs, params)
    theirs = _median_cuda(torch, peer, reps)
    want = peer().float().reshape(out.shape)
    err = float((out.float() - want).abs().max() / want.abs().max().clamp_min(1e-30))
    return {
        "workload": name,
        "ncd": ours,
        "torch": theirs,
        "ncd first": first,
        "predicted": _predicted(model),
        "rel err": err,
    }


def bench_emulator(name: str, model: Any) -> dict[str, Any]:
    g = model.graph
    rng = np.random.default_rng(0)
    xs = [
        rng.standard_normal(g.shape(v)).astype(g.values[v].dtype.numpy, copy=False)
        for v in g.inputs
    ]
    params = ncd.init(model, seed=0)
    exe = ncd.compile(model, "cuda", device="emulator")
    t0 = time.perf_counter()
    got = np.asarray(exe(*xs, params=params), np.float64)
    first = time.perf_counter() - t0
    want = np.asarray(ncd.run(model, *xs, params=params), np.float64)
    err = float(np.abs(got - want).max() / max(np.abs(want).max(), 1e-30))
    return {"workload": name, "ncd first": first, "predicted": _predicted(model), "rel err": err}


def table(rows: list[dict[str, Any]]) -> str:
    def ms(v: float | None) -> str:
        return "-" if v is None else f"{v * 1e3:.3f} ms"

    lines = [
        "| workload | ncd | torch | ncd/torch | predicted (h200) | ncd/predicted | ncd first "
        "| rel err |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for r in rows:
        ours, theirs, pred = r.get("ncd"), r.get("torch"), r.get("predicted")
        ratio = f"{ours / theirs:.2f}" if ours and theirs else "-"
        fidelity = f"{ours / pred:.2f}" if ours and pred else "-"
        cells = [r["workload"], ms(ours), ms(theirs), ratio, ms(pred), fidelity]
        cells += [f"{r['ncd first']:.2f} s", f"{r['rel err']:.1e}"]
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--quick", action="store_true", help="sizes divided by 4")
    ap.add_argument("--emulator", action="store_true", help="tiny sizes on the host emulator")
    ap.add_argument("--reps", type=int, default=20)
    ap.add_argument("--only", default="", help="substring of workload names to run")
    args = ap.parse_args()
    if not args.emulator:
        try:
            import torch
        except ImportError:
            print("cuda_bench: torch is not installed (the peers are torch's kernels)")
            return 0
        if not torch.cuda.is_available():
            print("cuda_bench: no CUDA GPU here (python benchmarks/cuda_bench.py --emulator checks")
            print("the script and the kernels' outputs on the host emulator)")
            return 0
        print(f"device: {torch.cuda.get_device_name()}, torch {torch.__version__}")
    rows = []
    for name, model, kind in workloads(64 if args.emulator else 4 if args.quick else 1):
        if args.only and args.only not in name:
            continue
        row = (
            bench_emulator(name, model)
            if args.emulator
            else bench_gpu(name, model, kind, args.reps)
        )
        rows.append(row)
        print(f"  done: {name}", flush=True)
    print(table(rows))
    return 0


if __name__ == "__main__":
    sys.exit(main())
