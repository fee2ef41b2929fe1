"""Explain and inspect: the plan of a compiled model with the bytes each kernel moves, and
``emit`` (what ``ncd compile --target opencl --emit DIR`` writes). The plan shown is the one
rendered (``Generated.plan``, what ``ncd.plan(model, target="opencl")`` returns), and the
cost model prices that same plan, kernel for kernel, with its tiles."""

from __future__ import annotations

import json
import math
import os
from typing import Any

from ncd.axis import dtype_bytes
from ncd.codegen import KernelSource
from ncd.graph import Graph
from ncd_opencl.generate import Generated

__all__ = ["emit", "kernel_bytes", "plan_dict"]


def _elems(graph: Graph, axes: Any) -> int:
    return math.prod(graph.size(a) or 1 for a in axes)


def kernel_bytes(graph: Graph, src: KernelSource) -> dict[str, int]:
    """Bytes one launch reads and writes in global memory, counting each buffer once: the
    kernel's inputs and parameters, and its outputs (the compulsory traffic; re-reads served
    by caches are not counted). An axis left free to run time counts as size 1."""
    read = written = 0
    for b in src.buffers:
        t = graph.values[b.value].dtype if b.value is not None else "float32"
        n = _elems(graph, b.axes) * int(dtype_bytes(t))
        if b.output:
            written += n
        else:
            read += n
    return {"read": read, "written": written, "total": read + written}


def plan_dict(gen: Generated) -> dict[str, Any]:
    g = gen.graph
    kernels: list[dict[str, Any]] = []
    for src in gen.kernels:
        k = src.kernel
        kernels.append(
            {
                "name": src.name,
                "style": src.style,
                "ops": [
                    f"{g.nodes[i].op.label} [{g.nodes[i].path or g.nodes[i].op.kind}]"
                    for i in k.nodes
                ],
                "partitions": [str(p) for p in k.partitions],
                "schedule": [
                    {"partition": str(p), "chosen": p in set(k.choices)}
                    for p in k.schedule.partitions
                ],
                "reads": [f"{v} {g.values[v]}" for v in k.inputs],
                "writes": [f"{v} {g.values[v]}" for v in k.outputs],
                "params": [b.param for b in src.buffers if b.param is not None],
                # a size left free is its C expression over the kernel's size arguments
                "global_size": [n if isinstance(n, int) else str(n) for n in src.global_size],
                "local_size": list(src.local_size) if src.local_size else None,
                "size_arguments": [name for name, _ in src.sizes],
                "bytes": kernel_bytes(g, src),
                "source": f"{src.name}.cl",
                "plan_kernel": k.name,
            }
        )
    predicted = perf_bytes(gen)
    for row, n in zip(kernels, predicted, strict=False):
        row["bytes"]["ncd_perf"] = n
    total = sum(row["bytes"]["total"] for row in kernels)
    return {
        "target": gen.plan.target,
        "kernels": kernels,
        "total_bytes": total,
        "boundaries": [
            f"value {b.value} {g.values[b.value]}: {b.reason}" for b in gen.plan.boundaries
        ],
    }


def perf_bytes(gen: Generated, machine: str = "cpu") -> list[int]:
    """Bytes per kernel of the rendered plan (in its order) at the first memory level as the
    ``perf`` cost model predicts them, priced with the plan's tiles, when a plugin registers
    one (ncd-perf: an optional companion, asked through the plugin registry, never imported);
    ``[]`` otherwise."""
    from ncd.plugins import registry

    reg = registry()
    if "perf" not in reg.cost_models:
        return []
    try:
        priced = reg.cost_model("perf").cost(gen.graph, machine, plan=gen.plan)
        if len(priced.kernels) != len(gen.plan.kernels) or not all(
            k.levels for k in priced.kernels
        ):
            return []
        return [int(float(k.levels[0].bytes)) for k in priced.kernels]
    except Exception:  # a prediction is an annotation of the plan; never fail an emit for it
        return []


def emit(gen: Generated, out: str) -> list[str]:
    """Write one ``.cl`` per kernel, ``program.cl``, ``plan.json`` and ``plan.txt``."""
    os.makedirs(out, exist_ok=True)
    written = []
    for src in gen.kernels:
        if not src.text:  # launches a function written by an earlier, identical kernel
            continue
        path = os.path.join(out, f"{src.name}.cl")
        with open(path, "w") as f:
            f.write(src.text)
        written.append(path)
    plan = plan_dict(gen)
    for name, text in (
        ("program.cl", gen.source),
        ("plan.json", json.dumps(plan, indent=1)),
        ("plan.txt", describe(plan)),
    ):
        path = os.path.join(out, name)
        with open(path, "w") as f:
            f.write(text)
        written.append(path)
    return written


def describe(plan: dict[str, Any]) -> str:
    lines = [f"{len(plan['kernels'])} OpenCL kernel(s), {plan['total_bytes'] / 1e6:.3f} MB moved"]
    for k in plan["kernels"]:
        b = k["bytes"]
        perf = f" (ncd-perf {b['ncd_perf'] / 1e6:.3f})" if "ncd_perf" in b else ""
        lines.append(
            f"  {k['name']:<40} {k['style']:<9} {b['total'] / 1e6:10.3f} MB{perf}  "
            f"({', '.join(k['ops'])})"
        )
    lines.extend(f"  boundary {b}" for b in plan["boundaries"])
    return "\n".join(lines) + "\n"
