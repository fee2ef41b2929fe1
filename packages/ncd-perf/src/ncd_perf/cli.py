"""``ncd perf`` and ``ncd calibrate``: thin shells over ``cost`` and ``calibrate``, plus the demo
step that prices the demo transformer on an H100 and on this machine."""

from __future__ import annotations

import argparse
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
        "--machine", default="h100", help="h100, h200, a100, cpu, host, or a .toml/.json"
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
    p.add_argument(
        "--overlap",
        choices=["max", "sum", "compute-sum"],
        help="how levels and op classes combine: max (overlap, the roofline) or sum (the "
        "napkin paper's); default the machine's",
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
        overlap=args.overlap,
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
    p.add_argument(
        "--refresh", action="store_true", help="measure again instead of reading the cache"
    )
    p.add_argument("-o", "--output", help="also write the machine 'host' as a .toml file")


def calibrate(refresh: bool = False) -> Any:
    """This host's ``ncd_perf.host.Calibration``: detected facts and measured rates, read from
    the per-host cache or measured now (a few seconds)."""
    from ncd_perf.host import calibration

    return calibration(refresh)


def run_calibrate(args: argparse.Namespace) -> int:
    from ncd_perf.host import host_machine, machine_toml

    cal = calibrate(args.refresh)
    print(cal.describe())
    print("(measured now)" if cal.fresh else "(from the cache: --refresh measures again)")
    machine = host_machine()
    print()
    print(machine.describe())
    if args.output:
        with open(args.output, "w") as f:
            f.write(machine_toml(machine))
        print(f"machine written to {args.output}")
    return 0


def demo_step(ctx: dict[str, Any]) -> None:
    """Price the demo transformer on an H100 and on this machine."""
    from ncd_perf.model import cost
    from ncd_perf.report import table

    model = ctx["model"]
    for machine in ("h100", "host"):
        result = cost(model, machine)
        print(table(result))
        print()
    from ncd_perf.report import formulas

    print(formulas(ctx["unbound"]))
