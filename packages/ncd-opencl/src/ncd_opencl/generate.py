"""From a bound graph to OpenCL C: plan kernels, pick layouts, render each kernel.

``generate(graph)`` is pure (no device): it returns the plan and one ``KernelSource`` per
planned kernel, which ``ncd compile --emit`` writes out and the runtime builds.
"""

from __future__ import annotations

import functools
from collections.abc import Mapping
from typing import Any

import attrs

from ncd.codegen import KernelSource, render_kernel
from ncd.codegen.program import (
    Generated,
    assemble,
    check_given_plan,
    choose_layouts,
    target_rules,
)
from ncd.codegen.stream import streamed_template
from ncd.codegen.vector import vector_template
from ncd.graph import Graph
from ncd.kernel import FusionPlan
from ncd_opencl.dialect import OPENCL, program_preamble

__all__ = [
    "Generated",
    "generate",
]


def templates(tiled: bool = True, local: bool = False, lanes: int = 8) -> list[Any]:
    from ncd_opencl.convolve import conv_template
    from ncd_opencl.matmul import tiled_template, tiled_template_local
    from ncd_opencl.outer import outer_template

    out: list[Any] = [streamed_template]
    if tiled:
        matmul = tiled_template_local if local else functools.partial(tiled_template, lanes=lanes)
        out += [matmul, conv_template, functools.partial(outer_template, lanes=lanes)]
    out.append(vector_template)
    return out


def generate(
    graph: Graph,
    *,
    fuse: bool | str = True,
    tiled: bool = True,
    local: bool = False,
    plan: FusionPlan | None = None,
    tiles: Mapping[Any, int] | None = None,
    wide: bool = False,
    lanes: int = 8,
) -> Generated:
    """Render ``plan`` (default: ``opencl_plan(graph, fuse, tiled, local, tiles)``, which is
    what ``ncd.plan(model, target="opencl")`` returns). ``local``: stage matmul tiles in
    ``__local`` memory (for devices where it is dedicated on-chip memory;
    ``ncd_opencl.backend`` decides from the device). A plan given is rendered as it is: its
    graph must be ``graph``, its target ``"opencl"`` or ``None`` (ncd's own plan, rendered
    with the templates' default tiles). Sizes still free in ``graph`` become kernel
    arguments (one program serves every length); ``wide``: 64-bit indices and size
    arguments throughout (the build for arrays past 2^31 - 1 elements); ``lanes``: the
    device's native float vector width (``native_lanes``; 16 renders the panel GEMM for
    float32 weight parameters, whose ``Buffer.panel`` the runtime packs: the default, 8,
    keeps the output of a generation without a device the same on every host)."""
    from ncd.errors import ScheduleError
    from ncd_opencl.schedule import check, opencl_plan

    if plan is None:
        plan = opencl_plan(graph, fuse, tiled, local, tiles, lanes)
    else:
        check_given_plan(plan, graph, "opencl")
        if tiles:
            raise ScheduleError(
                "generate(plan=..., tiles=...): tiles belong to the plan. Fix: "
                "ncd.plan(model, target='opencl', tiles=...) and pass that plan."
            )
        check(plan, local, lanes)
    layouts = choose_layouts(plan)
    rules = target_rules("opencl")
    tpl = templates(tiled, local, lanes)
    kernels = [render_kernel(k, OPENCL, rules, layouts, tpl, wide) for k in plan.kernels]
    return Generated(graph, _rendered(plan, kernels), assemble(kernels), layouts, program_preamble)


def _rendered(plan: FusionPlan, kernels: list[KernelSource]) -> FusionPlan:
    """The plan as rendered: a kernel whose recorded choices belong to a template that did not
    render it (a case the planner's test of the template missed) keeps the planner's partitions
    only, so the plan never claims tiles the source does not use."""
    from ncd_opencl.schedule import template_of

    out = []
    changed = False
    for k, src in zip(plan.kernels, kernels, strict=True):
        want = template_of(k)
        if want and want != src.style:
            k = attrs.evolve(k, choices=())
            changed = True
        out.append(k)
    return attrs.evolve(plan, kernels=out) if changed else plan
