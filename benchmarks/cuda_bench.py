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
import math
import statistics
import sys
import time
from collections.abc import Callable
from typing import Any

import numpy as np

import ncd
from ncd import nn, ops


def workloads(scale: int) -> list[tuple[str, Any, str]]:
    """(name, model, torch peer kind) at sizes divided by ``scale`` (the issue's list: memory-
    bound rows, matmuls 4096^3 and 8192^3 per format, attention per format, head width, length
    and mask, and a GPT-2-small block)."""
    bf16, f16 = ncd.bfloat16, ncd.float16
    rows, d = 8192 // scale, 4096 // scale
    out: list[tuple[str, Any, str]] = [
        (f"softmax f32 {rows}x{d}", ops.softmax("x").over("r").bind(r=rows, x=d), "softmax"),
        (
            f"layernorm bf16 {rows}x{d}",
            ops.layernorm("d").over("r").bind(r=rows, d=d).cast(bf16),
            "layernorm",
        ),
    ]
    for n in (4096 // scale, 8192 // scale):
        mm = ops.einsum("a b, b c -> a c").bind(a=n, b=n, c=n)
        for fmt, label in ((None, "f32"), (bf16, "bf16"), (f16, "f16")):
            out.append((f"matmul {label} {n}^3", mm if fmt is None else mm.cast(fmt), "matmul"))
    shapes = [(128, s) for s in (1024, 4096, 16384)] + [(64, 4096)]
    for fmt, label in ((bf16, "bf16"), (f16, "f16")):
        for width, seq in shapes:
            seq //= scale
            for causal in (False, True):
                att = nn.attention(causal=causal).over("h")
                att = att.bind(h=16, q=seq, x=seq, d=width, v=width).cast(fmt)
                kind = "causal" if causal else "full"
                name = f"attention {label} h16 s{seq} d{width} {kind}"
                out.append((name, att, f"sdpa-{kind}"))
    seq, batch = 1024 // scale, max(1, 8 // scale)
    block = nn.transformer_block().over("b")
    block = block.bind(b=batch, seq=seq, d_model=768, heads=12, d_head=64, d_ff=3072)
    out.append((f"GPT-2-small block f32 b{batch} s{seq}", block, "module"))
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


def _peer(
    torch: Any, kind: str, xs: list[Any], params: dict[str, Any], model: Any = None
) -> Callable[[], Any]:
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
    if kind == "module":  # ncd's own export (ncd-torch), under torch.compile
        return _compiled_module(torch, model, xs, params)
    (x,) = xs
    return lambda: torch.softmax(x, dim=-1)


def _compiled_module(torch: Any, model: Any, xs: list[Any], params: dict[str, Any]) -> Any:
    from ncd_torch import state_dict

    mod = ncd.export(model, "torch").cuda().eval()
    mod.load_state_dict(state_dict({k: p.cpu().numpy() for k, p in params.items()}))
    compiled = torch.compile(mod)
    with torch.no_grad():
        compiled(*xs)  # compile outside the timing (its time is shown by torch, not here)
    return lambda: compiled(*xs)


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
    try:
        peer = _peer(torch, kind, xs, params, model)
    except ImportError as e:  # the block's peer needs ncd-torch
        print(f"  {name}: no torch peer ({e})")
        peer = None
    theirs, err = None, float("nan")
    if peer is not None:
        with torch.no_grad():
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
        "rate": _rate(model, kind, ours),
    }


def _rate(model: Any, kind: str, seconds: float) -> str:
    """TFLOP/s of a matmul or attention, GB/s of a row kernel (inputs read, outputs written)."""
    g = model.graph
    if kind == "matmul":
        a, b = (g.shape(v) for v in g.inputs)
        return f"{2 * a[0] * a[1] * b[1] / seconds / 1e12:.1f} TFLOP/s"
    if kind.startswith("sdpa"):
        h, q, dd = g.shape(g.inputs[0])
        x = g.shape(g.inputs[1])[1]
        share = 0.5 if kind.endswith("causal") else 1.0
        return f"{4 * h * q * x * dd * share / seconds / 1e12:.1f} TFLOP/s"
    if kind in ("softmax", "layernorm"):
        moved = sum(math.prod(g.shape(v)) * g.values[v].dtype.itemsize for v in g.inputs)
        moved += sum(math.prod(g.shape(v)) * g.values[v].dtype.itemsize for v in g.outputs)
        return f"{moved / seconds / 1e9:.0f} GB/s"
    return ""


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


HEADER = (
    "| workload | ncd | ncd rate | torch | ncd/torch | predicted (h200) | ncd/predicted "
    "| ncd first | rel err |\n|---|---|---|---|---|---|---|---|---|"
)


def row_line(r: dict[str, Any]) -> str:
    def ms(v: float | None) -> str:
        return "-" if v is None else f"{v * 1e3:.3f} ms"

    ours, theirs, pred = r.get("ncd"), r.get("torch"), r.get("predicted")
    ratio = f"{ours / theirs:.2f}" if ours and theirs else "-"
    fidelity = f"{ours / pred:.2f}" if ours and pred else "-"
    cells = [r["workload"], ms(ours), r.get("rate", ""), ms(theirs), ratio, ms(pred), fidelity]
    cells += [f"{r['ncd first']:.2f} s", f"{r['rel err']:.1e}"]
    return "| " + " | ".join(cells) + " |"


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
    print(HEADER, flush=True)  # a row per workload as it finishes (a timeout keeps the rest)
    for name, model, kind in workloads(64 if args.emulator else 4 if args.quick else 1):
        if args.only and args.only not in name:
            continue
        if args.emulator and (kind == "module" or " f16 " in name):
            continue  # the emulator checks the script, not every size
        row = (
            bench_emulator(name, model)
            if args.emulator
            else bench_gpu(name, model, kind, args.reps)
        )
        print(row_line(row), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
