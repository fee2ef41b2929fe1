"""From a bound graph to CUDA C: plan, choose layouts, render each kernel through core's
renderer in the CUDA dialect. Pure (no compiler, no device): ``ncd_cuda.build`` compiles what
this returns.

The plan is core's (``ncd.codegen.plans.plan_for``: ``ncd.fuse`` and its splits, the same
kernels as ncd-opencl's), marked ``target="cuda"``: the kernels that run are the kernels
``ncd.plan(model, target="cuda")`` returns, so ncd-perf and ncd-diagram see them.
Templates tried in order: the tensor-core matmul (16-bit contractions, ``ncd_cuda.mma``), the
CUDA-core matmul (float32/float64 contractions, ``ncd_cuda.simt``),
core's streamed normaliser (online softmax / L2 attention); everything else is core's pointwise
driver.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import attrs

from ncd.codegen import KernelGen, KernelSource, render_kernel
from ncd.codegen.program import (
    Generated,
    assemble,
    check_given_plan,
    choose_layouts,
    target_rules,
)
from ncd.codegen.stream import stream_choices, streamed_template
from ncd.errors import ScheduleError
from ncd.graph import Graph
from ncd.kernel import FusionPlan
from ncd_cuda.dialect import CUDA, program_preamble
from ncd_cuda.flash import flash_choices
from ncd_cuda.mma import mma_choices
from ncd_cuda.simt import simt_choices

__all__ = ["Generated", "cuda_plan", "generate"]

#: the streamed attention on a GPU: one query row per thread (its accumulator row in registers),
#: 128 rows per block (4 warps), keys in chunks of 16 (the scores of a chunk in registers too)
STREAM_CHUNK = 16
STREAM_BLOCK = 128


def cuda_plan(graph: Graph, tiles: Mapping[Any, int] | None = None) -> FusionPlan:
    """The plan ncd-cuda renders, marked ``target="cuda"``: ``ncd.fuse``'s kernels with the
    splits core's ``plan_for`` makes (a plain-sum stream and sibling maps become matmuls, each
    a tensor-core tile in 16-bit formats), the templates' tiles as choices: the tensor-core
    attention's (64 keys a chunk, 64 query rows a block, 16 a warp), else the streamed
    attention's (16 keys, 1 row per thread, 128 rows a block), the tensor-core matmul's
    (64 x 64 a block at level 0, 32 x 32 a warp at level 1) and the CUDA-core matmul's (64 x 64
    a block, 4 x 4 a thread). ``tiles=`` (``ncd.planning.apply_tiles``) may set the CUDA-core
    matmul's block tile and the streamed attention's key chunk; other changes are refused."""
    from ncd.codegen.plans import plan_for
    from ncd.planning import apply_tiles

    base = plan_for(graph)
    layouts, rules = choose_layouts(base), target_rules("cuda")
    kernels, styles = [], []
    for k in base.kernels:
        made, style = _planned(k, layouts, rules)
        kernels.append(k.with_choices(made) if made else k)
        styles.append(style)
    plan = FusionPlan(graph, kernels, base.boundaries, target="cuda")
    if not tiles:
        return plan
    tiled = apply_tiles(plan, tiles)
    for default, k, style in zip(plan.kernels, tiled.kernels, styles, strict=True):
        if set(k.choices) != set(default.choices):
            _check_tiles(k, default, style, layouts, rules)
    return tiled


def _check_tiles(k: Any, default: Any, style: str, layouts: Any, rules: Any) -> None:
    """What ``tiles=`` may change on CUDA: the CUDA-core matmul's block tile and the streamed
    attention's key chunk; the tensor-core templates' tiles are fixed (their warp layout is)."""
    from ncd_cuda.simt import check_tiles

    if style == "simt":
        check_tiles(k, KernelGen(k, CUDA, rules, layouts))
        return
    changed = set(k.choices) - set(default.choices)
    if style == "streamed" and all(p.kind == "stream" and p.level == 0 for p in changed):
        chunk = next(p.tile for p in changed)
        if isinstance(chunk, int) and 1 <= chunk <= 64:
            return
    shown = ", ".join(str(p) for p in sorted(changed, key=str))
    raise ScheduleError(
        f"kernel {k.name}: tiles= asks for {shown}; ncd-cuda's {style or 'pointwise'} "
        "template renders its own tiles there (the tensor-core templates' warp layout is fixed; "
        "the streamed attention takes a key chunk of 1 to 64 at level 0, the CUDA-core matmul "
        "a block tile). Fix: drop those tiles."
    )


def _planned(
    k: Any, layouts: Mapping[int, Any], rules: Mapping[type, Any]
) -> tuple[list[Any], str]:
    """The choices the template that will render ``k`` records, and that template's style."""
    gen = KernelGen(k, CUDA, rules, layouts)
    if k.streamed:
        made = flash_choices(gen)
        if made:
            return made, "flash"
        return stream_choices(k, STREAM_CHUNK, 1, STREAM_BLOCK), "streamed"
    made = mma_choices(gen)
    if made:
        return made, "mma"
    made = simt_choices(gen)
    return made, "simt" if made else ""


def templates() -> list[Any]:
    from ncd.codegen.lanes import lanes_template
    from ncd_cuda.flash import flash_template
    from ncd_cuda.mma import mma_template
    from ncd_cuda.simt import simt_template

    return [mma_template, simt_template, flash_template, streamed_template, lanes_template]


def generate(graph: Graph, *, plan: FusionPlan | None = None, wide: bool = False) -> Generated:
    """Render ``plan`` (default ``cuda_plan(graph)``) as CUDA C. ``wide``: 64-bit indices."""
    layouts, rules = None, target_rules("cuda")
    if plan is None:
        plan = cuda_plan(graph)
    else:
        check_given_plan(plan, graph, "cuda")
        layouts = choose_layouts(plan)
        for k in plan.kernels:  # a plan made by hand: its tiles checked as cuda_plan checks them
            made, style = _planned(k, layouts, rules)
            if set(k.choices) != set(made):
                _check_tiles(k, attrs.evolve(k, choices=tuple(made)), style, layouts, rules)
    layouts = choose_layouts(plan) if layouts is None else layouts
    tpl = templates()
    kernels = [render_kernel(k, CUDA, rules, layouts, tpl, wide) for k in plan.kernels]
    return Generated(graph, _rendered(plan, kernels), assemble(kernels), layouts, program_preamble)


def _rendered(plan: FusionPlan, kernels: list[KernelSource]) -> FusionPlan:
    """The plan as rendered: a kernel whose recorded choices belong to a template that did not
    render it (a ``wide`` build, say) keeps the planner's partitions only, so the plan never
    claims tiles the source does not use."""
    out, changed = [], False
    layouts, rules = choose_layouts(plan), target_rules("cuda")
    for k, src in zip(plan.kernels, kernels, strict=True):
        if k.choices and src.style != _planned(k, layouts, rules)[1]:
            k, changed = attrs.evolve(k, choices=()), True
        out.append(k)
    return attrs.evolve(plan, kernels=out) if changed else plan
