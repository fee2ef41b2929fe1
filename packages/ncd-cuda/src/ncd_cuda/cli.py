"""``ncd cuda inspect MODEL``: each kernel's CUDA C, PTX and ptxas report; and the demo step."""

from __future__ import annotations

import argparse
import os
import time
from typing import Any

__all__ = ["configure", "demo_step", "describe", "run"]


def configure(p: argparse.ArgumentParser) -> None:
    from ncd.cli import add_model_arguments

    sub = p.add_subparsers(dest="action", required=True)
    q = sub.add_parser("inspect", help="compile a model's kernels and print their resources")
    add_model_arguments(q)
    q.add_argument(
        "--arch", default=None, help="sm_80, sm_86, sm_89, sm_90 (default: the GPU's, else sm_90)"
    )
    q.add_argument("--compiler", default=None, choices=["nvrtc", "nvcc"])
    q.add_argument("--source", action="store_true", help="print each kernel's CUDA C")
    q.add_argument("--ptx", action="store_true", help="print each kernel's PTX")
    q.add_argument("--emit", metavar="DIR", help="write each kernel's .cu, .ptx and .cubin")


def describe(b: Any) -> str:
    """One line per kernel: style, registers, shared memory, stack, spills, launch shape."""
    rows = [
        f"{len(b.kernels)} CUDA kernels ({len(b.launches)} launches) for {b.arch}, {b.compiler}",
        f"{'kernel':44} {'style':9} {'regs':>4} {'smem':>6} {'stack':>5} {'spill':>5}"
        "  grid x block",
    ]
    for k in b.kernels:
        r, s = k.resources, k.launch
        block = s.local_size[0] if s.local_size else None
        total = s.global_size[0]
        if block is None:
            grid = f"1 x {total}"
        elif isinstance(total, int):
            grid = f"{-(-total // block)} x {block}"
        else:  # a size left to run time
            grid = f"({total}) / {block} x {block}"
        rows.append(
            f"{k.name[:44]:44} {k.style:9} {r.registers:4} {r.shared_bytes:6} {r.stack_bytes:5} "
            f"{r.spills:5}  {grid}"
        )
    return "\n".join(rows) + "\n"


def run(args: argparse.Namespace) -> int:
    from ncd.cli import load_model
    from ncd_cuda.program import build

    model = load_model(args.model, args.bind)
    b = build(model, args.arch, compiler=args.compiler)
    print(describe(b), end="")
    for k in b.kernels:
        if args.source:
            print(f"\n// ---- {k.name}.cu\n{k.source}")
        if args.ptx:
            print(f"\n// ---- {k.name}.ptx\n{k.ptx}")
    if args.emit:
        os.makedirs(args.emit, exist_ok=True)
        for k in b.kernels:
            for ext, data in (
                (".cu", k.source.encode()),
                (".ptx", k.ptx.encode()),
                (".cubin", k.cubin),
            ):
                with open(os.path.join(args.emit, k.name + ext), "wb") as f:
                    f.write(data)
        print(f"wrote {3 * len(b.kernels)} files to {args.emit}")
    return 0


def demo_step(ctx: dict[str, Any]) -> None:
    """The GPT's kernels compiled for sm_90 in float32 and bfloat16 (no GPU needed), and a run
    where a GPU is present."""
    import ncd
    from ncd_cuda.program import build
    from ncd_cuda.runtime import probe

    model = ctx["model"]
    for label, m in (("float32", model), ("bfloat16", model.cast(ncd.bfloat16))):
        t0 = time.perf_counter()
        b = build(m, "sm_90")
        took = time.perf_counter() - t0
        regs = max(k.resources.registers for k in b.kernels)
        spills = sum(k.resources.spills for k in b.kernels)
        mma = sum(k.style == "mma" for k in b.kernels)
        print(
            f"cuda {label}: {len(b.kernels)} kernels compiled to PTX and cubin for sm_90 by "
            f"{b.compiler} in {took:.2f} s; at most {regs} registers, {spills} bytes spilled, "
            f"{mma} on tensor cores"
        )
    found = probe()
    if not found.ok:
        print(f"cuda run: skipped ({found.missing.split('. Fix')[0] if found.missing else ''})")
