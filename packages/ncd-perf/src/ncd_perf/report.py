"""Printable views of a priced model: the per-kernel, per-level table, the derived formulas, and
a roofline plot (matplotlib, imported only when drawing)."""

from __future__ import annotations

from typing import Any

import sympy as sp

from ncd_perf.model import ModelCost

__all__ = ["formulas", "roofline", "table"]


def _fmt(x: Any, unit: str = "") -> str:
    try:
        v = float(x)
    except TypeError:
        text = str(x)
        return text if len(text) <= 28 else text[:25] + "..."
    for scale, suffix in ((1e15, "P"), (1e12, "T"), (1e9, "G"), (1e6, "M"), (1e3, "K")):
        if abs(v) >= scale:
            return f"{v / scale:.3g}{suffix}{unit}"
    return f"{v:.3g}{unit}"


def _time(t: float | None) -> str:
    if t is None:
        return "-"
    return f"{t * 1e6:.1f} us" if t < 1e-3 else f"{t * 1e3:.2f} ms"


def table(cost: ModelCost) -> str:
    """One row per kernel and level: tiles, bytes moved, resident bytes/elements, time,
    bottleneck."""
    m = cost.machine
    lines = [f"performance model on {m.name}: {len(cost.kernels)} kernel(s)"]
    if cost.plan.target is not None:  # tiles marked given are the target's own
        lines[0] += f" as target {cost.plan.target!r} renders them"
    head = f"{'kernel':<34} {'level':<10} {'tiles':<30} {'moved':>9} {'resident':>9} {'time':>10}"
    lines += [head, "-" * len(head)]
    for k in cost.kernels:
        flops = ", ".join(f"{kind} {_fmt(n)}" for kind, n in k.flops.items()) or "no FLOPs"
        lines.append(
            f"{k.kernel.name[:34]:<34} {'FLOPs':<10} {flops[:30]:<30} {'':>9} {'':>9} "
            f"{_time(k.time):>10}  {k.bottleneck}"
        )
        for lv in k.levels:
            tiles = " ".join(f"{str(s)[2:]}={_fmt(v)}" for s, v in lv.tiles.items()) or "-"
            unit = m.levels[lv.level].unit
            res = _fmt(lv.resident, "B" if unit == "bytes" else "")
            fit = "" if lv.fits else " (does not fit)"
            lines.append(
                f"{'':<34} {lv.name[:10]:<10} {tiles[:30]:<30} {_fmt(lv.bytes, 'B'):>9} "
                f"{res:>9} {_time(lv.time):>10}{fit}"
            )
        if k.occupancy is not None:
            lines.append(f"{'':<34} {'SM':<10} {k.occupancy.describe()}")
        for c in k.collectives:
            lines.append(
                f"{'':<34} {'devices':<10} {c.kind + ' ' + c.label:<30.30} "
                f"{_fmt(c.volume(), 'B'):>9}"
            )
    total = cost.time
    lines.append("-" * len(head))
    lines.append(
        f"total time {_time(total)}; FLOPs "
        + ", ".join(f"{kind} {_fmt(n)}" for kind, n in cost.flops.items())
    )
    return "\n".join(lines)


def formulas(model: Any, fuse: bool = True) -> str:
    """Each distinct kernel's symbolic H(t) and M(t) at level 1, in config labels and tiles
    (``model`` unbound, so sizes stay symbols)."""
    from ncd.fusion import fuse as plan_fusion
    from ncd.kernel import unfused
    from ncd_perf.formulas import KernelFormulas, size_function

    graph = model.graph
    plan = plan_fusion(graph) if fuse else unfused(graph)
    size = size_function(graph)
    lines = ["derived formulas (level 1, elements; t_* are tiles, sizes are config labels):"]
    seen: set[str] = set()
    for kernel in plan.kernels:
        f = KernelFormulas(kernel, size)
        h, m = sp.simplify(f.transfers()), f.resident()
        body = ", ".join(n.op.label for n in kernel.ops)
        if f"{body}|{h}|{m}" in seen:
            continue
        seen.add(f"{body}|{h}|{m}")
        stream = f", streaming {f.stream.name}" if f.stream is not None else ""
        lines.append(f"  {kernel.name} [{body}]{stream}:")
        lines.append(f"    H = {h}")
        lines.append(f"    M = {m}")
    return "\n".join(lines)


def roofline(cost: ModelCost, path: str, dtype: str = "float32") -> str:
    """Draw the machine's roofline (level-1 bandwidth, each compute rate) with every kernel
    placed at its arithmetic intensity (FLOPs per byte from the backing store)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    import numpy as np

    m = cost.machine
    bw_level = next((lv for lv in m.levels[1:] if lv.bandwidth is not None), None)
    fig, ax = plt.subplots(figsize=(7, 4.5))
    xs = np.logspace(-2, 4, 200)
    if bw_level is not None:
        for kind in ("matrix", "vector", "special"):
            rate = m.rate(kind, dtype)
            if rate is not None and kind in m.compute:
                ax.plot(xs, np.minimum(rate, xs * float(bw_level.bandwidth)), label=f"{kind} roof")
    labelled: set[str] = set()
    for k in cost.kernels:
        body = k.kernel.name.split("_", 1)[-1]
        try:
            total = sum(float(n) for n in k.flops.values())
            moved = float(k.levels[0].bytes)
        except (TypeError, IndexError):
            continue
        if total <= 0 or moved <= 0 or not k.time:
            continue
        ax.scatter([total / moved], [total / k.time], s=18)
        if body not in labelled:  # repeated layers share a point: label it once
            labelled.add(body)
            ax.annotate(k.kernel.name[:24], (total / moved, total / k.time), fontsize=6)
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlabel("arithmetic intensity (FLOP / byte from level 0)")
    ax.set_ylabel("attained FLOP/s")
    ax.set_title(f"roofline: {m.name}")
    ax.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)
    return path
