"""One training step (forward, backward, AdamW) on ncd-opencl beside torch eager and
torch.compile, on the transformer x1-x4 workloads of ``opencl_bench.py``: one table per run.

The loss is the mean squared error of the block stack's output against a fixed target
(``model >> nn.mse()``). ncd: ``ncd.grad`` of the loss compiled for OpenCL (one joint forward
and backward graph), then ``ncd.optim.AdamW(target="opencl")`` (one elementwise update model
per parameter, run parameter by parameter); the two are timed apart and together. torch: the
same loss model exported by ncd-torch (forward only) with the same parameters,
``loss.backward()`` (torch autograd) and ``torch.optim.AdamW`` (its default foreach update);
torch.compile compiles the module (forward and backward by AOTAutograd), the optimiser step
stays eager.
"max rel" is the largest difference between ncd's and torch autograd's gradients at the first
step, over the largest gradient.

    python benchmarks/train_bench.py            # small sizes (b2 s64 d128), a minute or two
    python benchmarks/train_bench.py --full     # opencl_bench's sizes (b4 s512 d512): long
    python benchmarks/train_bench.py --attention 2048   # attention's backward and its memory

``--attention SEQ``: causal attention (8 heads, d_head 64) forward and backward at length SEQ,
``ncd.grad`` of ``sum(attention(Q, K, V) * W)`` with respect to Q, K and V on ncd-opencl, with
FlashAttention-2's backward (the default) and with the plain rules (``flash=False``), beside
torch autograd through ``F.scaled_dot_product_attention`` (on the CPU, torch's own flash
kernels) and through the written-out ``softmax(Q K^T) V``. Memory: ncd's is the device
buffers the program holds (``buffer_bytes()``: every value between kernels, inputs and outputs
included, and its largest); torch's is what autograd saves for the backward (inputs included).
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
from collections.abc import Callable
from typing import Any

import numpy as np

import ncd
from ncd import nn

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from opencl_bench import workloads


def _best(fn: Callable[[], Any], reps: int, warmup: int = 2) -> float:
    """The fastest of ``reps`` calls after ``warmup``: on a shared machine the least disturbed
    call is the best estimate of the step's own time (every peer measured alike)."""
    for _ in range(warmup):
        fn()
    ts = []
    for _ in range(reps):
        t0 = time.perf_counter()
        fn()
        ts.append(time.perf_counter() - t0)
    return min(ts)


def bench(name: str, model: Any, x: np.ndarray, reps: int, peers: bool) -> dict[str, Any]:
    loss_model = model >> nn.mse()
    y = np.random.default_rng(1).standard_normal(x.shape).astype(np.float32)
    params = ncd.init(loss_model, seed=0)
    row: dict[str, Any] = {"workload": name}
    t0 = time.perf_counter()
    step = ncd.compile(ncd.grad(loss_model), "opencl")
    opt = ncd.optim.AdamW(lr=1e-4, target="opencl")
    state = opt.init(params)
    _, grads = step(x, y, params=params)
    opt.update(params, grads, state)
    row["ncd first"] = time.perf_counter() - t0
    first_grads = {k: np.array(v) for k, v in grads.items()}
    box = {"params": params, "state": state, "grads": grads}

    def fwd_bwd() -> None:
        box["grads"] = step(x, y, params=box["params"])[1]

    def update() -> None:
        box["params"], box["state"] = opt.update(box["params"], box["grads"], box["state"])

    def whole() -> None:
        fwd_bwd()
        update()

    row["ncd fwd+bwd"] = _best(fwd_bwd, reps)
    row["ncd AdamW"] = _best(update, reps)
    row["ncd step"] = _best(whole, reps)
    if peers:
        import torch

        from ncd_torch import state_dict

        torch.set_num_threads(os.cpu_count() or 1)
        tx, ty = torch.from_numpy(x), torch.from_numpy(y)
        for kind in ("torch eager", "torch.compile"):
            mod = ncd.export(loss_model, "torch")
            mod.load_state_dict(state_dict(params))
            mod.train()
            run = torch.compile(mod) if kind == "torch.compile" else mod
            topt = torch.optim.AdamW(mod.parameters(), lr=1e-4)

            def tstep(run: Any = run, topt: Any = topt) -> None:
                topt.zero_grad(set_to_none=True)
                run(tx, ty).backward()
                topt.step()

            t0 = time.perf_counter()
            topt.zero_grad(set_to_none=True)
            run(tx, ty).backward()
            row[f"{kind} first"] = time.perf_counter() - t0
            if kind == "torch eager":
                named = dict(mod.named_parameters())
                # relative to the largest gradient of all: the key bias's is zero in exact
                # arithmetic (softmax ignores a shift), float32 noise in both
                top = max(float(np.max(np.abs(g))) for g in first_grads.values())
                row["max rel"] = max(
                    float(np.max(np.abs(named[k].grad.numpy() - g))) / top
                    for k, g in first_grads.items()
                )
            row[kind] = _best(tstep, reps)
    return row


def attention_rows(seq: int, reps: int, heads: int = 8, d: int = 64) -> list[dict[str, Any]]:
    """Attention's forward + backward at length ``seq``: ncd-opencl (flash and plain rules),
    torch SDPA and torch's written-out attention; time and memory of each."""
    import torch

    from ncd import ops

    att = nn.attention(causal=True).over("h").bind(h=heads, q=seq, x=seq, d=d, v=d)
    rng = np.random.default_rng(0)
    qkv = [rng.standard_normal((heads, seq, d)).astype(np.float32) for _ in range(3)]
    w = rng.standard_normal((heads, seq, d)).astype(np.float32)
    g = att.graph
    types = [g.values[i] for i in (*g.inputs, *g.outputs)]
    loss = ncd.trace(
        lambda a, b, c, wt: ops.sum(("h", "q", "v"))(ops.mul()(att(a, b, c), wt)), inputs=types
    )
    rows = []
    for flash in (True, False):
        step = ncd.compile(ncd.grad(loss, wrt=[0, 1, 2], flash=flash), "opencl")
        t0 = time.perf_counter()
        step(*qkv, w)
        first = time.perf_counter() - t0
        total, largest = step.buffer_bytes()
        rows.append(
            {
                "peer": f"ncd-opencl ({'flash' if flash else 'plain rules'})",
                "fwd+bwd": _best(lambda step=step: step(*qkv, w), reps, 1),
                "first": first,
                "memory": total,
                "largest": largest,
            }
        )
    torch.set_num_threads(os.cpu_count() or 1)
    mask = torch.ones(seq, seq, dtype=torch.bool).tril()

    def written(a: Any, b: Any, c: Any) -> Any:
        s = (a @ b.transpose(-1, -2)) / d**0.5
        return torch.softmax(s.masked_fill(~mask, float("-inf")), -1) @ c

    def sdpa(a: Any, b: Any, c: Any) -> Any:
        return torch.nn.functional.scaled_dot_product_attention(a, b, c, is_causal=True)

    tw = torch.from_numpy(w)
    for name, fn in (("torch SDPA", sdpa), ("torch softmax(QK^T)V", written)):
        ts = [torch.from_numpy(a).requires_grad_() for a in qkv]
        saved: dict[int, int] = {}

        def pack(t: Any) -> Any:
            saved[t.untyped_storage().data_ptr()] = t.untyped_storage().nbytes()
            return t

        with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
            (fn(*ts) * tw).sum().backward()

        def run(fn: Any = fn, ts: Any = ts) -> None:
            for t in ts:
                t.grad = None
            (fn(*ts) * tw).sum().backward()

        rows.append(
            {
                "peer": name,
                "fwd+bwd": _best(run, reps, 1),
                "memory": sum(saved.values()),
                "largest": max(saved.values()),
            }
        )
    return rows


def attention_table(seq: int, rows: list[dict[str, Any]]) -> str:
    lines = [
        f"attention forward + backward, causal, 8 heads x {seq} x 64, float32",
        "| peer | fwd+bwd | first call | memory | largest buffer | / torch SDPA |",
        "|---|---|---|---|---|---|",
    ]
    base = next(r["fwd+bwd"] for r in rows if r["peer"] == "torch SDPA")
    for r in rows:
        first = f"{r['first']:.1f} s" if "first" in r else "-"
        lines.append(
            f"| {r['peer']} | {r['fwd+bwd'] * 1e3:.1f} ms | {first} | "
            f"{r['memory'] / 2**20:.1f} MiB | {r['largest'] / 2**20:.2f} MiB | "
            f"{r['fwd+bwd'] / base:.2f} |"
        )
    return "\n".join(lines)


def table(rows: list[dict[str, Any]]) -> str:
    cols = [
        "workload",
        "ncd fwd+bwd",
        "ncd AdamW",
        "ncd step",
        "ncd first",
        "torch eager",
        "torch.compile",
        "torch.compile first",
        "ncd/eager",
        "ncd/tc",
        "max rel",
    ]

    def ms(v: float | None) -> str:
        return "-" if v is None else (f"{v * 1e3:.1f} ms" if v < 10 else f"{v:.1f} s")

    lines = ["| " + " | ".join(cols) + " |", "|" + "---|" * len(cols)]
    for r in rows:
        timed = [ms(r.get(c)) for c in cols[1:8]]
        eager, tc = r.get("torch eager"), r.get("torch.compile")
        ratios = [f"{r['ncd step'] / t:.2f}" if t else "-" for t in (eager, tc)]
        err = f"{r['max rel']:.1e}" if "max rel" in r else "-"
        lines.append("| " + " | ".join([r["workload"], *timed, *ratios, err]) + " |")
    return "\n".join(lines)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--full", action="store_true", help="opencl_bench's full sizes")
    ap.add_argument("--reps", type=int, default=5)
    ap.add_argument("--only", default="", help="substring of workload names to run")
    ap.add_argument("--no-peers", action="store_true")
    ap.add_argument("--warm", action="store_true", help="keep the on-disk program caches")
    ap.add_argument("--attention", type=int, default=0, metavar="SEQ", help="attention only")
    args = ap.parse_args()
    if not args.warm:  # both compilers start cold, as in opencl_bench.py
        os.environ["NCD_OPENCL_CACHE"] = tempfile.mkdtemp(prefix="ncd-opencl-bench-")
        os.environ["TORCHINDUCTOR_CACHE_DIR"] = tempfile.mkdtemp(prefix="inductor-bench-")
        os.environ["POCL_CACHE_DIR"] = tempfile.mkdtemp(prefix="pocl-bench-")
    if args.attention:
        print(attention_table(args.attention, attention_rows(args.attention, args.reps)))
        return
    rows = []
    for name, model, make in workloads(quick=not args.full):
        if not name.startswith("transformer") or (args.only and args.only not in name):
            continue
        (x,) = make(model)
        rows.append(bench(name, model, x, args.reps, not args.no_peers))
        print(f"  done: {name}", flush=True)
    print(
        f"host: {os.cpu_count()} CPUs; one training step (forward, backward, AdamW), "
        f"fastest of {args.reps}"
    )
    print(table(rows))


if __name__ == "__main__":
    main()
