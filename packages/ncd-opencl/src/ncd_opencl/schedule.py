"""The choices ncd-opencl's templates make for a kernel, recorded in its schedule.

``opencl_plan`` is what ``ncd.plan(model, target="opencl")`` returns and what ``generate``
renders: ``plan_for`` (``ncd.fuse`` split for PoCL), then per kernel the tiles of the template
that will render it, as ``Kernel.choices`` (see ``ncd.kernel``):

- streamed normalised contraction (attention): the key chunk as the level-0 stream tile
  (``CHUNK`` = 32 keys), the query rows each work-item takes as a level-1 group (``ROWS`` = 4);
- tiled matmul: the work-group tile (``RM * WG_M`` = 32 rows, ``RN * WG_N`` = 16 columns) at
  level 0 and the work-item's register block (4 x 2) at level 1, on the row axes (the Linear's
  loop axes) and the column axes (its output axes), flattened row-major; on a device with
  16-float vectors a float32 weight parameter takes the panel GEMM instead
  (``ncd_opencl.matmul.panel_form``): 8 rows x one panel of 32 columns per work-item, 16
  work-items along the rows per group (128 x 32 at level 0);
- vector row kernels: the vector width (8) as a level-1 stream of the row axis.

The defaults equal the templates' constants, so a plan nobody edits renders the same source as
before. ``check`` refuses what a template cannot render (``ScheduleError`` naming the kernel,
the axis, the tile and what the template supports), before any source is written.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any

from ncd.axis import Axis
from ncd.codegen.plans import LinearForm, flat_tile, linear_form, spread_tile
from ncd.errors import ScheduleError
from ncd.graph import Graph
from ncd.kernel import FusionPlan, Kernel, Partition

__all__ = ["annotate", "check", "flat_tile", "opencl_plan", "template_of", "work_group"]

VECTOR_WIDTH = 8  # the OpenCL dialect's vector width (ncd_opencl.dialect.OPENCL)
MAX_WORK_GROUP = 256  # work-items per group the tiled matmul may ask for (every device has 256)
MAX_SCORES = 4096  # private scores per work-item in the chunked attention (rows x chunk)


def opencl_plan(
    graph: Graph,
    fuse: bool | str = True,
    tiled: bool = True,
    local: bool = False,
    tiles: Mapping[Any, int] | None = None,
    lanes: int = VECTOR_WIDTH,
) -> FusionPlan:
    """The plan ncd-opencl renders for ``graph``, its template tiles recorded as choices and the
    user's ``tiles`` (``ncd.planning.apply_tiles``) applied and checked; ``lanes``: the
    device's native float vector width (16 takes the panel GEMM where it applies)."""
    from ncd.planning import apply_tiles
    from ncd_opencl.plan import choose_layouts, plan_for

    base = plan_for(graph, fuse)
    plan = annotate(base, choose_layouts(base), tiled, local, lanes)
    if tiles:
        plan = apply_tiles(plan, tiles)
    check(plan, local, lanes)
    return plan


def annotate(
    plan: FusionPlan,
    layouts: Mapping[int, tuple[Axis, ...]],
    tiled: bool,
    local: bool = False,
    lanes: int = VECTOR_WIDTH,
) -> FusionPlan:
    """``plan`` with each kernel's template tiles as its choices, marked ``target="opencl"``
    (``local``: the local-memory matmul, whose work-groups are fixed)."""
    kernels = []
    for k in plan.kernels:
        made = _choices(k, layouts, tiled, local, lanes)
        kernels.append(k.with_choices(made) if made else k)
    return FusionPlan(plan.graph, kernels, plan.boundaries, target="opencl")


def template_of(kernel: Kernel) -> str:
    """The template whose tiles ``kernel``'s choices are (``""``: none recorded)."""
    levels = {(p.kind, p.level) for p in kernel.choices}
    if ("stream", 1) in levels:
        return "vector"
    if ("stream", 0) in levels:
        return "streamed"
    if levels:
        return "tiled"
    return ""


def _choices(
    k: Kernel, layouts: Mapping[int, tuple[Axis, ...]], tiled: bool, local: bool, lanes: int
) -> list[Partition]:
    from ncd_opencl.convolve import conv_kernel

    g = k.graph
    if any(g.size(a) is None for a in k.axes()):
        return []  # sizes left free: the templates decide when they are bound
    if k.streamed:
        return _stream_choices(k)
    if tiled:
        made = _matmul_choices(k, layouts, local, lanes)
        if made:
            return made
        if conv_kernel(k, layouts) is not None:
            return []  # the convolution template's blocking is its own (ncd_opencl.convolve)
    return _vector_choices(k, layouts)


# -- streamed attention (ncd.codegen.stream._rows_template) -----------------------------------


def _stream_choices(k: Kernel) -> list[Partition]:
    from ncd.codegen.stream import CHUNK, ROWS, stream_choices

    return stream_choices(k, CHUNK, ROWS)


# -- tiled matmul (ncd_opencl.matmul.tiled_template) ------------------------------------------


def heavy_nodes(k: Kernel) -> list[Any]:
    """The nodes of ``k`` a matmul template renders itself: all but elementwise ops (the
    epilogue) and the renames the schedule aliases."""
    renames = k.schedule.aliases
    return [
        n
        for n in k.ops
        if n.op.category != "elementwise"
        and not (n.op.category == "view" and n.op.out_axes[0] in renames)  # type: ignore[attr-defined]
    ]


def kernel_linear(k: Kernel) -> LinearForm | None:
    """The learned map the tiled template would render in ``k`` (``linear_form`` of its
    heavy nodes)."""
    return linear_form(k.graph, heavy_nodes(k), {v for n in k.ops for v in n.outputs})


def _matmul(k: Kernel, layouts: Mapping[int, tuple[Axis, ...]]) -> Any:
    """(node, row axes, column axes) when the tiled template renders ``k``, else ``None``."""
    from ncd_opencl.matmul import RM, RN, VW

    g = k.graph
    form = kernel_linear(k)
    if form is None:
        return None
    lin, in_axes = form.node, form.in_axes
    x = form.x
    if x in {v for n in k.ops for v in n.outputs}:
        return None
    m_axes, n_axes = form.loop, form.out_axes
    if set(in_axes) & set(n_axes):
        return None  # a weight whose axes repeat (linear("d -> d")): the template declines it
    kdim = math.prod(_size(g, a) for a in in_axes)
    if kdim % VW or _prod(g, m_axes) < RM or _prod(g, n_axes) < RN:
        return None
    full = set(m_axes) | set(n_axes)
    renames = k.schedule.aliases
    if any({renames.get(a, a) for a in g.values[v].axes} != full for v in k.outputs):
        return None
    order = layouts.get(x, g.values[x].axes)
    if tuple(order[len(order) - len(in_axes) :]) != tuple(in_axes):
        return None
    if any(a not in m_axes for a in g.values[x].axes if a not in in_axes):
        return None
    w = form.weight
    if isinstance(w, int) and tuple(layouts.get(w, g.values[w].axes)) != (*n_axes, *in_axes):
        return None  # a weight value laid out otherwise than (out.., in..)
    return lin, m_axes, n_axes


def _matmul_choices(
    k: Kernel,
    layouts: Mapping[int, tuple[Axis, ...]],
    local: bool = False,
    lanes: int = VECTOR_WIDTH,
) -> list[Partition]:
    found = _matmul(k, layouts)
    if found is None:
        return []
    _, m_axes, n_axes = found
    g = k.graph
    (rm, rn), (wg_m, wg_n) = matmul_tiles(k, local, lanes)
    out: list[Partition] = []
    for axes, per_item, per_group in ((m_axes, rm, rm * wg_m), (n_axes, rn, rn * wg_n)):
        out += spread_tile(g, axes, per_group, 0) + spread_tile(g, axes, per_item, 1)
    return out


def renders_panel(k: Kernel, local: bool, lanes: int) -> bool:
    """The matmul of ``k`` takes the panel GEMM (``ncd_opencl.matmul.panel_form``) in a
    float32 kernel."""
    from ncd.codegen.lower import arith_dtype
    from ncd_opencl.dialect import OPENCL
    from ncd_opencl.matmul import panel_form

    form = kernel_linear(k)
    return (
        not local
        and form is not None
        and panel_form(k.graph, form, lanes)
        and arith_dtype(k, OPENCL) == "float32"
    )


def matmul_tiles(k: Kernel, local: bool, lanes: int) -> tuple[tuple[int, int], tuple[int, int]]:
    """((rows, columns) per work-item, default (rows, columns) of work-items per group) of the
    matmul template rendering ``k``: the panel GEMM's or the dot-product block's."""
    from ncd_opencl.matmul import PANEL, PANEL_RM, RM, RN

    form = kernel_linear(k)
    assert form is not None
    if renders_panel(k, local, lanes):
        return (PANEL_RM, PANEL), panel_group(k.graph, form.loop)
    return (RM, RN), default_group(k.graph, form.loop, form.out_axes, local)


def panel_group(g: Graph, m_axes: Sequence[Axis]) -> tuple[int, int]:
    """The panel GEMM's work-items per group (rows, columns) when no tile is chosen: 16 along
    the rows (they share one panel of the weight), fewer for fewer rows, one panel wide."""
    from ncd_opencl.matmul import PANEL_RM, PANEL_WG

    if any(g.size(a) is None for a in m_axes):
        return PANEL_WG, 1
    return max(1, min(PANEL_WG, -(-_prod(g, m_axes) // PANEL_RM))), 1


def default_group(
    g: Graph, m_axes: Sequence[Axis], n_axes: Sequence[Axis], local: bool = False
) -> tuple[int, int]:
    """The tiled matmul's work-items per group (rows, columns) when no tile is chosen: 8 x 8,
    but for few rows (a recurrent cell's batch, a short sequence) a group no taller than the
    rows, as wide as the work-items it frees, so no work-item computes clamped copies of the
    last rows (the local-memory variant stages fixed 8 x 8 groups; sizes left to run time
    take 8 x 8 too)."""
    from ncd_opencl.matmul import RM, RN, WG_M, WG_N

    if any(g.size(a) is None for a in (*m_axes, *n_axes)):
        return WG_M, WG_N
    wg_m = WG_M if local else max(1, min(WG_M, -(-_prod(g, m_axes) // RM)))
    wg_n = max(WG_N, min((WG_M * WG_N) // wg_m, -(-_prod(g, n_axes) // RN)))
    return wg_m, wg_n


def work_group(
    kernel: Kernel,
    m_axes: Sequence[Axis],
    n_axes: Sequence[Axis],
    per_item: tuple[int, int],
    default: tuple[int, int],
) -> tuple[int, int]:
    """Work-items per group (rows, columns) of the tiled matmul: the chosen level-0 tile over
    the level-1 (per work-item) tile, else ``default``."""
    out = []
    for axes, item, dflt in ((m_axes, per_item[0], default[0]), (n_axes, per_item[1], default[1])):
        t = flat_tile(kernel, axes, 0, item * dflt)
        out.append(dflt if t is None else max(1, t // item))
    return out[0], out[1]


# -- vector row kernels (ncd.codegen.vector.vector_template) ----------------------------------


def _vector_choices(k: Kernel, layouts: Mapping[int, tuple[Axis, ...]]) -> list[Partition]:
    from ncd.codegen.vector import has_vector_rule

    g = k.graph
    axes: set[Axis] = set()
    for n in k.ops:
        if n.op.category in ("normaliser", "reduction"):
            axes.update(a for grp in n.op.signature()[0] for a in grp)
    if not axes:
        if not k.outputs:  # nothing read later (a scan's unused final state): no choices
            return []
        order = layouts.get(k.outputs[-1], g.values[k.outputs[-1]].axes)
        axes = {order[-1]} if order else set()
    if len(axes) != 1:
        return []
    (a,) = axes
    if _size(g, a) % VECTOR_WIDTH:
        return []
    for n in k.ops:
        if not has_vector_rule(n.op):
            return []
        if any(a in p.axes and p.axes[-1] != a for p in n.op.params()):
            return []
    for v in (*k.inputs, *k.outputs):
        order = layouts.get(v, g.values[v].axes)
        if (a in order and order[-1] != a) or g.values[v].dtype != "float32":
            return []
    return [Partition(a, "stream", VECTOR_WIDTH, 1)]


# -- what the templates can render -------------------------------------------------------------


def check(plan: FusionPlan, local: bool = False, lanes: int = VECTOR_WIDTH) -> None:
    """Refuse choices a template cannot render (see the module docstring)."""
    from ncd_opencl.matmul import RM, RN, WG_M, WG_N

    for k in plan.kernels:
        kind = template_of(k)
        if kind == "vector":
            for p in k.choices:
                if p.level == 1 and p.kind == "stream" and p.tile != VECTOR_WIDTH:
                    raise ScheduleError(
                        f"kernel {k.name}: a vector tile of {p.tile} along {p.axis.describe()}; "
                        f"the OpenCL row template walks rows in float{VECTOR_WIDTH} vectors "
                        f"only. Fix: leave the level-1 tile of {p.axis.name} at {VECTOR_WIDTH}."
                    )
        elif kind == "streamed":
            x = k.streamed[0]
            chunk = k.chosen(x, 0) or 1
            rows = max(
                [p.tile for p in k.choices if p.level == 1 and isinstance(p.tile, int)] or [1]
            )
            if chunk * rows > MAX_SCORES:
                raise ScheduleError(
                    f"kernel {k.name}: a chunk of {chunk} keys along {x.describe()} for {rows} "
                    f"query rows per work-item holds {chunk * rows} scores in private "
                    f"memory; the streamed template supports at most {MAX_SCORES}. Fix: a "
                    "smaller chunk or fewer rows per work-item."
                )
        elif kind == "tiled":
            form = kernel_linear(k)
            if form is None:
                continue
            m_axes, n_axes = form.loop, form.out_axes
            (rm, rn), (wg_m, wg_n) = matmul_tiles(k, local, lanes)
            what = (("rows", m_axes, rm, wg_m), ("columns", n_axes, rn, wg_n))
            groups = 1
            for name, axes, item, wg in what:
                t1 = flat_tile(k, axes, 1, item)
                if t1 is not None and t1 != item:
                    raise ScheduleError(
                        f"kernel {k.name}: {t1} {name} per work-item over "
                        f"({', '.join(a.describe() for a in axes)}); the tiled matmul renders "
                        f"{rm} rows x {rn} columns per work-item only (its register "
                        f"block). Fix: leave the level-1 tile at {item}."
                    )
                t0 = flat_tile(k, axes, 0, item * wg)
                if t0 is not None and t0 % item:
                    raise ScheduleError(
                        f"kernel {k.name}: a work-group tile of {t0} {name} over "
                        f"({', '.join(a.describe() for a in axes)}) is no multiple of the "
                        f"{item} {name} each work-item computes. Fix: a multiple of {item}."
                    )
                n = wg if t0 is None else t0 // item
                if local and n != wg:
                    raise ScheduleError(
                        f"kernel {k.name}: the local-memory matmul stages {RM * WG_M} x "
                        f"{RN * WG_N} tiles only; a work-group tile of {t0} {name} is not "
                        f"supported there. Fix: keep {item * wg}, or local_memory=False."
                    )
                groups *= n
            if groups > MAX_WORK_GROUP:
                raise ScheduleError(
                    f"kernel {k.name}: the chosen work-group tiles make {groups} work-items "
                    f"per group; the tiled matmul supports at most {MAX_WORK_GROUP}. Fix: "
                    "smaller level-0 tiles."
                )


def _size(g: Graph, a: Axis) -> int:
    n = g.size(a)
    if n is None:
        raise ScheduleError(f"axis {a.describe()} has no size; bind it before planning for opencl")
    return n


def _prod(g: Graph, axes: Sequence[Axis]) -> int:
    return math.prod(_size(g, a) for a in axes)
