"""The register-blocked template for a convolution: an einsum that reads one operand through
sliding windows (``ncd.ops.window``, read in place) and the other as a weight, with an
elementwise epilogue (bias, batch norm in eval form, ReLU, a residual add...).

Each work-item computes ``RC`` output channels (the output axes only the weight carries) at
``VL`` consecutive positions of the output's unit-stride axis, in ``RC`` accumulators of
``VL`` lanes: per contracted element (input channel and kernel tap) it reads ``VL`` windowed
inputs (each through the window's own bounds-checked rule) and ``RC`` weights, and makes
``RC x VL`` multiply-adds of them, where the pointwise renderer makes one per two reads. No
im2col array is built. Channels and positions past the ends are clamped on read and masked on
write, so any size renders; the epilogue is the generic pull-based renderer reading the
finished sums, as in the tiled matmul. Float32 kernels with every size known only; a kernel
whose plan carries tiles (``ncd.plan(..., tiles=...)``) is left to the renderer that honours
them.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

import attrs

from ncd.axis import Axis
from ncd.codegen import KernelGen, KernelSource
from ncd.codegen.layout import ceil_div
from ncd.kernel import Kernel
from ncd.primitives import library as L
from ncd.primitives import window as W

MAX_TAPS = 7  # taps unrolled by the neighbour-tap path

__all__ = ["PV", "RC", "VL", "ConvMatch", "conv_kernel", "conv_template"]

#: output channels (at most), position vectors of VL lanes per work-item. Measured on a 2-core
#: Xeon (AVX-512) for a 3x3 64 -> 64 conv at 56x56: 32 x 1 took 40 ms, 16 x 2 50, 8 x 4 78,
#: 8 x 1 90; the channel block is what saves reads (one windowed input feeds 32 lanes' FMAs)
RC, PV, VL = 32, 1, 8


@attrs.frozen
class ConvMatch:
    """How a kernel is a convolution: the einsum node, its windowed operand ``x`` and weight
    operand ``w`` (value ids), the channel axes (the output's axes only ``w`` carries), the
    unit-stride position axis ``pos`` and the other output axes ``rest`` (in layout order)."""

    node: Any
    x: int
    w: int
    channels: tuple[Axis, ...]
    pos: Axis
    rest: tuple[Axis, ...]
    contracted: tuple[Axis, ...]
    #: the window over ``pos`` when its taps are neighbours (stride and dilation 1): the ``VL
    #: + |k| - 1`` inputs under a work-item's positions are read once for all taps
    taps: Any = None


def _windowed(v: int, made: Mapping[int, Any]) -> bool:
    """``v`` is computed in the kernel through at least one window."""
    todo, seen = [v], set()
    while todo:
        u = todo.pop()
        node = made.get(u)
        if node is None or u in seen:
            continue
        seen.add(u)
        if isinstance(node.op, W.Window):
            return True
        todo.extend(node.inputs)
    return False


def conv_kernel(k: Kernel, layouts: Mapping[int, tuple[Axis, ...]]) -> ConvMatch | None:
    """The convolution ``k`` computes, when the template renders it, else ``None``."""
    g = k.graph
    if k.streamed or k.choices or any(g.size(a) is None for a in k.axes()):
        return None
    renames = k.aliases
    nodes = k.ops
    heavy = [
        n
        for n in nodes
        if n.op.category not in ("elementwise", "source")
        and not isinstance(n.op, W.Window)
        and not (n.op.category == "view" and n.op.out_axes[0] in renames)  # type: ignore[attr-defined]
    ]
    if len(heavy) != 1 or not isinstance(heavy[0].op, L.Einsum) or len(heavy[0].inputs) != 2:
        return None
    ein = heavy[0]
    made = {v: n for n in nodes for v in n.outputs}
    out = ein.outputs[0]
    oa = g.values[out].axes
    last = k.outputs[-1]
    order = [renames.get(x, x) for x in layouts.get(last, g.values[last].axes)]
    if not order or set(order) != set(oa):
        return None
    if any({renames.get(x, x) for x in g.values[v].axes} != set(oa) for v in k.outputs):
        return None
    if any(g.values[v].dtype != "float32" for n in nodes for v in (*n.inputs, *n.outputs)):
        return None
    # the windowed operand carries the output's unit-stride axis, the weight does not
    pos = order[-1]
    a, b = ein.inputs
    if pos in g.values[b].axes:
        a, b = b, a
    xa, wa = g.values[a].axes, g.values[b].axes
    if pos not in xa or pos in wa or not _windowed(a, made):
        return None
    channels = tuple(x for x in oa if x in wa and x not in xa)
    if not channels:
        return None
    rest = tuple(x for x in order if x not in channels and x != pos)
    contracted = tuple(x for x in wa if x not in oa) + tuple(
        x for x in xa if x not in oa and x not in wa
    )
    win = made.get(a)
    taps = None
    if win is not None and isinstance(win.op, W.Window) and win.op.out == pos:
        op = win.op
        plain = op.stride == op.dilation == op.upsample == 1 and not op.reverse
        if plain and op.k in contracted and 1 < (g.size(op.k) or 0) <= MAX_TAPS:
            taps = win
    return ConvMatch(ein, a, b, channels, pos, rest, contracted, taps)


def _n(gen: KernelGen, a: Axis) -> int:
    n = gen.size(a)
    assert isinstance(n, int)  # conv_kernel declines kernels with sizes left to run time
    return n


def conv_template(gen: KernelGen) -> KernelSource | None:
    k = gen.kernel
    m = conv_kernel(k, gen.layouts)
    d = gen.dialect
    if m is None or gen.cdtype != "float32" or d.vector_width != VL:
        return None
    w, it, ity = gen.w, gen.itype, gen.ityp
    nc = math.prod(_n(gen, a) for a in m.channels)
    npos = _n(gen, m.pos)
    rc = min(RC, nc)  # channels per work-item
    cb, pb = ceil_div(nc, rc), ceil_div(npos, VL * PV)
    total = math.prod(_n(gen, a) for a in m.rest) * cb * pb
    gid = gen.unique("gid")
    w.line(f"const {it} {gid} = {d.gid(0, gen.wide)};")
    w.line(f"if ({gid} >= {total}) return;")
    p0 = gen.let(f"{gid} % {pb} * {VL * PV}", "p0", ity, const=True)
    c0 = gen.let(f"{gid} / {pb} % {cb} * {rc}", "cb0", ity, const=True)
    env: dict[Axis, Any] = {}
    if m.rest:
        q = gen.let(f"{gid} / {pb * cb}", "q", ity, const=True)
        env = {
            a: gen.let(e, f"i_{a.name}", ity, const=True) for a, e in gen.split(m.rest, q).items()
        }
    chans = []
    for r in range(rc):
        c = gen.let(f"min({gen.c(c0)} + {r}, {nc - 1})", f"c{r}", ity, const=True)
        chans.append(gen.split(m.channels, c))
    lanes = [
        gen.let(f"min({gen.c(p0)} + {p}, {npos - 1})", f"p{p}", ity, const=True)
        for p in range(VL * PV)
    ]
    vt = d.vector(gen.ctype, VL)
    accs = [[gen.unique(f"acc{r}_{v}") for v in range(PV)] for r in range(rc)]
    for acc in (a for row in accs for a in row):
        w.line(f"{vt} {acc} = ({vt})({gen.c(gen.lit(0.0))});")
    loops = [a for a in m.contracted if m.taps is None or a != m.taps.op.k]
    _contract(gen, m, env, chans, lanes, accs, loops, {}, p0)
    renames = k.aliases
    for r in range(rc):
        for p in range(VL * PV):
            at = {**env, **chans[r], m.pos: lanes[p]}
            at.update({a: at[src] for a, src in renames.items() if src in at})
            s = d.lane(accs[r][p // VL], p % VL)
            with w.block(f"if ({gen.c(c0)} + {r} < {nc} && {gen.c(p0)} + {p} < {npos})"):
                gen.bound[m.node.outputs[0]] = lambda index, s=s: s
                for v in k.outputs:
                    gen.write(v, at, [])
    return gen.launch(total, "conv")


def _contract(
    gen: KernelGen,
    m: ConvMatch,
    env: dict[Axis, Any],
    chans: list[dict[Axis, Any]],
    lanes: list[Any],
    accs: list[list[str]],
    loops: list[Axis],
    at: dict[Axis, Any],
    p0: Any,
) -> None:
    """The loops over the contracted axes (the weight's order: its last axis innermost) and,
    inside them, ``acc_r += x[positions] * w[channel r]``."""
    if loops:
        with gen.loop(loops[0]) as i:
            _contract(gen, m, env, chans, lanes, accs, loops[1:], {**at, loops[0]: i}, p0)
        return
    vt = gen.dialect.vector(gen.ctype, VL)
    if m.taps is None:
        xs = [gen.c(gen.load(m.x, {**env, **at, m.pos: lane})) for lane in lanes]
        vecs = [f"({vt})({', '.join(xs[v * VL : v * VL + VL])})" for v in range(PV)]
        _accumulate(gen, m, env, chans, accs, at, vecs)
        return
    # neighbouring taps: input p0 - padding + j (j < VL + |k| - 1) is tap t of position j - t
    op: W.Window = m.taps.op
    n = _n(gen, op.axis)
    row = []
    for j in range(VL * PV + _n(gen, op.k) - 1):
        i = gen.let(f"{gen.c(p0)} + {j - op.padding}", "i_in", gen.ityp, const=True)
        inside = f"{gen.c(i)} >= 0 && {gen.c(i)} < {n}"
        clamped = f"min(max({gen.c(i)}, 0), {n - 1})"
        x = gen.c(gen.load(m.taps.inputs[0], {**env, **at, op.axis: clamped}))
        row.append(gen.c(gen.let(f"{inside} ? {x} : {gen.c(gen.lit(op.fill))}", "x")))
    for t in range(_n(gen, op.k)):
        vecs = [f"({vt})({', '.join(row[t + v * VL : t + v * VL + VL])})" for v in range(PV)]
        _accumulate(gen, m, env, chans, accs, {**at, op.k: str(t)}, vecs)


def _accumulate(
    gen: KernelGen,
    m: ConvMatch,
    env: dict[Axis, Any],
    chans: list[dict[Axis, Any]],
    accs: list[list[str]],
    at: dict[Axis, Any],
    vecs: list[str],
) -> None:
    """``acc_rv += xs_v * w[channel r]`` for every channel and position vector of the block."""
    xvs = [gen.unique(f"xv{v}") for v in range(PV)]
    for xv, e in zip(xvs, vecs, strict=True):
        gen.w.line(f"const {gen.dialect.vector(gen.ctype, VL)} {xv} = {e};")
    for row, c in zip(accs, chans, strict=True):
        wr = gen.c(gen.load(m.w, {**env, **at, **c}))
        for acc, xv in zip(row, xvs, strict=True):
            gen.w.line(f"{acc} += {xv} * {wr};")
