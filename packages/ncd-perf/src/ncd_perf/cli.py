"""``ncd perf`` and ``ncd calibrate``: thin shells over ``cost`` and ``calibrate``, plus the demo
step that prices the demo transformer on an H100 and on this machine."""

from __future__ import annotations

import argparse
import json
import re
import time
from typing import Any

__all__ = [
    "calibrate",
    "configure_calibrate",
    "configure_perf",
    "demo_step",
    "run_calibrate",
    "run_perf",
]


def configure_perf(p: argparse.ArgumentParser) -> None:
    from ncd.cli import add_model_arguments

    add_model_arguments(p)
    p.add_argument(
        "--machine", default="h100", help="h100, h200, a100, cpu, this, or a .toml/.json"
    )
    p.add_argument("--unfused", action="store_true", help="one kernel per op")
    p.add_argument(
        "--precision",
        default="ieee",
        choices=["ieee", "tf32"],
        help="tf32: float32 matmuls on the tensor cores' TF32 path",
    )
    p.add_argument(
        "--target",
        help="price the plan this backend renders (opencl, cuda); cuda also compiles it and "
        "reports each kernel's occupancy from ptxas's registers and shared memory",
    )
    p.add_argument("--dtype", help="re-type every float wire (bfloat16, float16, float8)")
    p.add_argument(
        "--parallel",
        nargs="*",
        default=[],
        metavar="LABEL=DEVICES",
        help="span config labels over devices (heads=8, d_ff=8, experts=8)",
    )
    p.add_argument("--plot", metavar="PNG", help="draw a roofline with every kernel on it")
    p.add_argument("--no-formulas", action="store_true", help="skip the symbolic formulas")


def run_perf(args: argparse.Namespace) -> int:
    from ncd.cli import load_model, parse_sizes
    from ncd_perf.model import cost
    from ncd_perf.report import formulas, roofline, table

    model = load_model(args.model, args.bind)
    t0 = time.perf_counter()
    plan, resources = None, None
    if args.target:
        import ncd
        from ncd.plugins import registry

        if args.unfused:
            raise ncd.NcdError("--unfused and --target contradict: a target renders its plan")
        if args.dtype:  # the target compiles the model in that format
            model = model.cast(ncd.dtypes.dtype(args.dtype))
        plan = ncd.plan(model, target=args.target)
        resources = registry().backend(args.target).resources(plan)
    result = cost(
        model,
        args.machine,
        fuse=not args.unfused,
        dtype=args.dtype,
        parallel=parse_sizes(args.parallel),
        plan=plan,
        resources=resources,
        precision=args.precision,
    )
    print(result.machine.describe())
    print()
    print(result.plan)
    print()
    print(table(result))
    if not args.no_formulas:
        print()
        print(formulas(_unbound(args.model), fuse=not args.unfused))
    if args.plot:
        print(f"\nroofline written to {roofline(result, args.plot, args.dtype or 'float32')}")
    print(f"\n(model priced in {time.perf_counter() - t0:.2f} s)")
    return 0


def _unbound(spec: str) -> Any:
    from ncd.cli import load_model

    return load_model(spec, [])


def configure_calibrate(p: argparse.ArgumentParser) -> None:
    p.add_argument("--size-mb", type=int, default=256, help="bytes per array for the copy test")
    p.add_argument(
        "--cache-mb", type=int, default=8, help="bytes per array for the cache-resident copy test"
    )
    p.add_argument("--n", type=int, default=2048, help="matmul size for the FLOP test")
    p.add_argument("-o", "--output", help="write a machine .toml based on 'this' with the results")


def calibrate(
    size_mb: int = 256, n: int = 2048, repeats: int = 5, cache_mb: int = 8
) -> dict[str, float]:
    """Measure this machine with NumPy: copy bandwidth (bytes read + written per second) of
    arrays far larger than the caches and of arrays that stay in the last-level cache, and
    float32 matmul FLOP/s; medians of ``repeats`` after a warm-up."""
    import numpy as np

    def median(fn: Any) -> float:
        fn()
        ts = []
        for _ in range(repeats):
            t0 = time.perf_counter()
            fn()
            ts.append(time.perf_counter() - t0)
        return float(sorted(ts)[len(ts) // 2])

    def copy_rate(mb: int) -> float:
        src = np.ones(mb * (1 << 20) // 4, dtype=np.float32)
        dst = np.empty_like(src)
        return 2 * src.nbytes / median(lambda: np.copyto(dst, src))

    a = np.random.default_rng(0).standard_normal((n, n), dtype=np.float32)
    b = np.random.default_rng(1).standard_normal((n, n), dtype=np.float32)
    t_mm = median(lambda: a @ b)
    return {
        "copy_bandwidth": copy_rate(size_mb),
        "cache_bandwidth": copy_rate(cache_mb),
        "matmul_flops": 2 * n**3 / t_mm,
    }


def calibrated(text: str, res: dict[str, float], stamp: str) -> str:
    """``this.toml``'s text with the measured figures put in: the L3 level's fill bandwidth
    (DRAM copy), the L2 level's (a copy resident in L3), float32 matrix and vector rates (and
    half of them for float64); each changed line says where its number came from."""
    values = {
        ("L3", "bandwidth"): (res["copy_bandwidth"], "copy of arrays larger than L3"),
        ("L2", "bandwidth"): (res["cache_bandwidth"], "copy of arrays resident in L3"),
        ("compute.matrix", "float32"): (res["matmul_flops"], "float32 matmul"),
        ("compute.vector", "float32"): (res["matmul_flops"], "the same FMA roofline"),
        ("compute.matrix", "float64"): (res["matmul_flops"] / 2, "half the float32 rate"),
        ("compute.vector", "float64"): (res["matmul_flops"] / 2, "half the float32 rate"),
    }
    out, where = [], ""
    for line in text.splitlines():
        head = re.match(r"\s*\[+([\w.]+)\]+", line)
        if head:
            where = head.group(1)
        name = re.match(r'\s*name\s*=\s*"([^"]*)"', line)
        if name and where == "levels":
            where = name.group(1)
        key = re.match(r"\s*(\w+)\s*=", line)
        hit = values.get((where, key.group(1))) if key else None
        if key is not None and hit is not None:
            line = f"{key.group(1)} = {hit[0]:.4g}  # ncd calibrate {stamp}: {hit[1]}"
        out.append(line)
    return "\n".join(out) + "\n"


def run_calibrate(args: argparse.Namespace) -> int:
    res = calibrate(args.size_mb, args.n, cache_mb=args.cache_mb)
    print(
        f"copy bandwidth: {res['copy_bandwidth'] / 1e9:.1f} GB/s (read + write, "
        f"{args.size_mb} MiB arrays)"
    )
    print(f"cache-resident copy: {res['cache_bandwidth'] / 1e9:.1f} GB/s ({args.cache_mb} MiB)")
    print(f"float32 matmul: {res['matmul_flops'] / 1e9:.1f} GFLOP/s")
    if args.output:
        import datetime
        import os

        from ncd_perf.machine import _HERE

        with open(os.path.join(_HERE, "this.toml")) as f:
            text = f.read()
        stamp = datetime.date.today().isoformat()
        with open(args.output, "w") as f:
            f.write(
                f"# calibrated by `ncd calibrate` on {stamp}: {json.dumps(res)}\n"
                + calibrated(text, res, stamp)
            )
        print(f"machine written to {args.output}")
    return 0


def demo_step(ctx: dict[str, Any]) -> None:
    """Price the demo transformer on an H100 and on this machine."""
    from ncd_perf.model import cost
    from ncd_perf.report import table

    model = ctx["model"]
    for machine in ("h100", "this"):
        result = cost(model, machine)
        print(table(result))
        print()
    from ncd_perf.report import formulas

    print(formulas(ctx["unbound"]))
