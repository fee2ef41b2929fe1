"""The tiled template for a learned linear map with an elementwise epilogue (bias, GELU,
residual add...): ``Y[m, n] = epilogue(sum_k X[m, k] W[n, k])``.

Each work-item computes an ``RM x RN`` block of outputs with ``float8`` accumulators over the
contracted axis (explicit vectors: PoCL then issues 8-wide FMAs whatever its auto-vectoriser
decides); an 8x8 work-group shares rows of ``X`` and ``W`` through the caches. With ``local``
(``tiled_template_local``: devices with dedicated local memory, i.e. GPUs, or on request) the
group stages its ``32 x KL`` tile of ``X`` and ``16 x KL`` tile of ``W`` in ``__local`` memory,
loaded cooperatively between two barriers, and every work-item reads its rows from there. On
PoCL's CPU device that is slower (a barrier makes PoCL save the accumulators, halving the rate:
local memory is ordinary memory there), so CPU devices use the cache-blocked loop. Rows and
columns past the ends are clamped on read and masked on write
(any M, N; K a multiple of 8, else the pointwise renderer runs, or a size left to run time:
whole vectors, then a scalar tail; local tiles zero-pad K). The epilogue (bias, GELU,
residual add, renames) is the generic pull-based renderer reading the finished sums.
"""

from __future__ import annotations

import math
from typing import Any

from ncd.axis import Axis
from ncd.codegen import KernelGen, KernelSource
from ncd.codegen.layout import Size, ceil_div
from ncd.codegen.plans import LinearForm, linear_form
from ncd.primitives import library as L
from ncd_opencl.schedule import default_group, heavy_nodes, work_group

__all__ = ["tiled_template"]

RM, RN, VW = 4, 2, 8  # rows, columns per work-item; vector width
WG_M, WG_N = 8, 8  # work-items per group along rows and columns
KC = 256  # contracted elements per chunk (cache blocking)
KL = 32  # contracted elements per __local tile (local staging)
#: the panel GEMM (devices with 16-float vectors, AVX-512 under PoCL): rows per work-item,
#: 16-float vectors per row (``PANEL_LANES * PANEL_RV`` columns: one panel of the weight), and
#: work-items per group along rows (they stream the same panel through the cache)
PANEL_LANES, PANEL_RM, PANEL_RV, PANEL_WG = 16, 8, 2, 16
PANEL = PANEL_LANES * PANEL_RV


def clamped_rows(
    gen: KernelGen, buf: Any, axes: Any, zero: dict[Axis, str], total: Size, count: int = RM
) -> list[tuple[str, dict[Axis, Any]]]:
    """The ``count`` rows of block ``mb`` over the flattened ``axes`` (``total`` of them), each
    clamped to the last one, with a pointer ``a<i>`` to its start in ``buf`` (the ``zero``
    axes at 0): (the row's index variable, its index per axis)."""
    w, d, it = gen.w, gen.dialect, gen.itype
    rows = []
    for i in range(count):
        m = gen.unique(f"m{i}")
        w.line(f"const {it} {m} = min(mb * {count} + {i}, {gen.index_lit(total - 1)});")
        env = gen.split(axes, m)
        rows.append((m, env))
        w.line(
            f"{d.global_} const {buf.ctype}* a{i} = {buf.name} + {buf.address({**env, **zero})};"
        )
    return rows


def _contiguous(buf: Any, axes: tuple[Axis, ...]) -> bool:
    """The axes are the buffer's last ones, in order (one unit-stride run)."""
    return tuple(buf.axes[len(buf.axes) - len(axes) :]) == tuple(axes)


def tiled_template_local(gen: KernelGen) -> KernelSource | None:
    """``tiled_template`` staging its tiles in ``__local`` memory."""
    return tiled_template(gen, local=True)


def panel_form(g: Any, form: LinearForm, lanes: int) -> bool:
    """The panel GEMM renders ``form`` with ``lanes``-float vectors: 16 of them (AVX-512), a
    float32 weight parameter (which the runtime packs in panels: ``Buffer.panel``), float32
    rows, at least one panel of columns and, where the rows are known, one block of them."""
    if lanes != PANEL_LANES or isinstance(form.weight, int):
        return False
    node, pname = form.weight
    p = next(p for p in node.op.params() if p.name == pname)
    if p.dtype != "float32" or g.values[form.x].dtype != "float32":
        return False
    if tuple(p.axes) != (*form.out_axes, *form.in_axes):
        return False  # packed as (out.., in..): the runtime splits the first len(out) axes
    sizes = [g.size(a) for a in form.loop]
    rows = None if any(n is None for n in sizes) else math.prod(sizes)
    cols = math.prod(int(g.size(a) or 0) for a in form.out_axes)
    return cols >= PANEL and (rows is None or rows >= PANEL_RM)


def tiled_template(gen: KernelGen, local: bool = False, lanes: int = VW) -> KernelSource | None:
    g = gen.graph
    k = gen.kernel
    nodes = [g.nodes[i] for i in k.nodes]
    renames = k.aliases
    form = linear_form(g, heavy_nodes(k), gen.made_here)
    if form is None or k.streamed:
        return None
    lin = form.node
    in_axes = form.in_axes
    x = form.x
    if x in gen.made_here:
        return None
    out_v = lin.outputs[0]
    m_axes = form.loop
    n_axes = form.out_axes
    kdim = math.prod(gen.size(a) for a in in_axes)
    msz = math.prod(gen.size(a) for a in m_axes)
    nsz = math.prod(gen.size(a) for a in n_axes)
    # run-time M or N: reads clamped, writes masked; a run-time K: whole vectors, then a tail
    if isinstance(kdim, int) and kdim % VW:
        return None
    if (isinstance(msz, int) and msz < RM) or (isinstance(nsz, int) and nsz < RN):
        return None
    full = set(m_axes) | set(n_axes)
    for v in k.outputs:
        if {renames.get(a, a) for a in g.values[v].axes} != full:
            return None
    xb = gen.value_buffer(x)
    if any(a not in m_axes for a in g.values[x].axes if a not in in_axes):
        return None
    if not local and gen.cdtype == "float32" and panel_form(g, form, lanes):
        if not _contiguous(xb, in_axes) or gen.dialect.vector_width != VW:
            return None
        known = [math.prod(int(g.size(a) or 0) for a in axes) for axes in (n_axes, in_axes)]
        return _panel(gen, form, xb, nodes, msz, *known)  # (a parameter's sizes are bound)
    wb = (
        gen.value_buffer(form.weight)
        if isinstance(form.weight, int)
        else gen.param_buffer(*form.weight)
    )
    if not _contiguous(xb, in_axes) or not _contiguous(wb, in_axes):
        return None
    # the row vectors load straight into the arithmetic type: both operands must compute in
    # the kernel's format (float16/bfloat16/float32 rows in a float32 kernel, float64 in float64)
    d = gen.dialect
    for buf in (xb, wb):
        if d.arith(buf.dtype) != gen.cdtype or d.vector_load(buf.dtype, "p", "") is None:
            return None
    cv = d.vector(gen.ctype, VW)  # accumulator and row vectors
    w = gen.w
    mb, nb = ceil_div(msz, RM), ceil_div(nsz, RN)
    it = gen.itype  # 64-bit when an array passes 2^31 elements
    w.line(f"const {it} nb = {gen.dialect.gid(0, gen.wide)};")
    w.line(f"const {it} mb = {gen.dialect.gid(1, gen.wide)};")
    zero = {a: "0" for a in in_axes}
    rows = clamped_rows(gen, xb, m_axes, zero, msz)
    cols = []
    for j in range(RN):
        n = gen.unique(f"n{j}")
        w.line(f"const {it} {n} = min(nb * {RN} + {j}, {gen.index_lit(nsz - 1)});")
        env = gen.split(n_axes, n)
        cols.append((n, env))
        # by position: the weight of ``linear("d -> d")`` holds ``d`` twice
        base = wb.address_at([*(env[a] for a in n_axes), *("0" for _ in in_axes)])
        w.line(f"{d.global_} const {wb.ctype}* b{j} = {wb.name} + {base};")
    for i in range(RM):
        for j in range(RN):
            w.line(f"{cv} c{i}_{j} = ({cv})({gen.lit(0.0)});")
    kv = kdim - kdim % VW
    if local:
        _local_tiles(gen, xb, wb, m_axes, n_axes, in_axes, msz, nsz, kdim)
    else:
        with (
            w.block(f"for ({it} k0 = 0; k0 < {kv}; k0 += {KC})"),
            w.block(
                f"for ({it} k = k0; k < min(k0 + {gen.index_lit(KC)}, "
                f"{gen.index_lit(kv)}); k += {VW})"
            ),
        ):
            # float32/float64: pointer casts to element-aligned vectors, not vload8 (a library
            # call on PoCL); bfloat16 a ushort8 widened by a shift; float16 vload_half8
            g_ = d.global_
            _multiply(
                gen,
                lambda i: d.vector_load(xb.dtype, f"a{i} + k", g_),
                lambda j: d.vector_load(wb.dtype, f"b{j} + k", g_),
            )
    sums = {}
    for i in range(RM):
        for j in range(RN):
            s = gen.unique(f"s{i}_{j}")
            c = f"c{i}_{j}"
            one = f"({d.vector(gen.ctype, 4)})({gen.lit(1.0)})"
            w.line(f"{gen.ctype} {s} = dot({c}.lo, {one}) + dot({c}.hi, {one});")
            tail = not isinstance(kv, int) or not isinstance(kdim, int) or kv < kdim
            if tail and not local:  # (local tiles zero-pad K instead)
                xk, wk = d.load(xb.dtype, f"a{i}", "k"), d.load(wb.dtype, f"b{j}", "k")
                w.line(f"for ({it} k = {kv}; k < {kdim}; ++k) {s} += {xk} * {wk};")
            sums[i, j] = s
    if _vector_outputs(gen, nodes, form) and _lane_epilogue(nodes, form, renames):
        _vector_epilogue(gen, form, sums, rows, cols, renames, msz, nsz)
    else:
        for i, (_, menv) in enumerate(rows):
            for j, (_, nenv) in enumerate(cols):
                env = {**menv, **nenv}
                env.update({a: env[src] for a, src in renames.items() if src in env})
                guard = f"mb * {RM} + {i} < {msz} && nb * {RN} + {j} < {nsz}"
                s = sums[i, j]
                with w.block(f"if ({guard})"):
                    gen.bound[out_v] = lambda index, s=s: (
                        f"({s} + {gen.param(*form.bias, index)})" if form.bias else s
                    )
                    for v in k.outputs:
                        gen.write(v, env, [])
    # the plan's tiles (a default tile as the planner spread it)
    dflt = default_group(k.graph, m_axes, n_axes, local)
    wg_m, wg_n = work_group(k, m_axes, n_axes, (RM, RN), dflt)
    gsize = (ceil_div(nb, wg_n) * wg_n, ceil_div(mb, wg_m) * wg_m)
    src = gen.source(gsize, (wg_n, wg_m), "tiled")
    return src


#: epilogue ops whose rules are valid on vector operands and read nothing but their input
LANE_OPS: tuple[type, ...] = (L.Unary, L.Activation, L.Scalar, L.Scale, L.Dropout)


def _lane_epilogue(nodes: list[Any], form: LinearForm, renames: dict[Axis, Axis]) -> bool:
    """The epilogue maps each output element alone (an activation chain after the bias) and
    the work-item's sums fill one vector."""
    return _lane_ops(nodes, form, renames) and RM * RN == VW


def _lane_ops(nodes: list[Any], form: LinearForm, renames: dict[Axis, Axis]) -> bool:
    """The epilogue maps each output element alone (an activation chain after the bias)."""
    for n in nodes:
        if n is form.node or n is form.source:
            continue
        if n.op.category == "view" and n.op.out_axes[0] in renames:
            continue
        if not isinstance(n.op, LANE_OPS) or getattr(n.op, "fn", "") in ("pow", "floordiv", "mod"):
            return False
        if getattr(n.op, "seed", None) is not None:  # seeded dropout reads its position
            return False
    return True


def _vector_outputs(gen: KernelGen, nodes: list[Any], form: LinearForm) -> bool:
    """The epilogue may run on float8 vectors: float32 arithmetic (no double8 calls) on values
    whose rounding, where ``KernelGen.load`` rounds a narrower value, has a vector form."""
    g = gen.graph
    return (
        gen.dialect.vector_width == VW
        and gen.cdtype == "float32"
        and all(
            g.values[v].dtype == "float32" or g.values[v].dtype in gen.dialect.vector_rounds
            for n in nodes
            for v in n.outputs
            if v != form.node.outputs[0]
        )
    )


def _panel(
    gen: KernelGen,
    form: LinearForm,
    xb: Any,
    nodes: list[Any],
    msz: Size,
    nsz: int,
    kdim: int,
) -> KernelSource:
    """The panel GEMM: each work-item computes ``PANEL_RM`` rows x one panel of ``PANEL``
    columns. Per contracted index it loads ``PANEL_RV`` 16-float vectors of the packed weight
    (``(ceil(N / PANEL), K, PANEL)``: one contiguous run per index), broadcasts one element of
    each row and does ``PANEL_RM x PANEL_RV`` vector multiply-adds (16 accumulators: half of
    AVX-512's registers). The block then goes to private memory and one epilogue, in loops over
    the rows and the columns, writes it: float8 vectors through an activation chain, else the
    generic renderer per element. Rows past the end are clamped on read and left out of the
    epilogue's loops, as are the panel's padding columns (the loops' bounds, so nothing the
    epilogue reads is hoisted past a guard)."""
    g, k, w, d, it = gen.graph, gen.kernel, gen.w, gen.dialect, gen.itype
    m_axes, n_axes, in_axes = form.loop, form.out_axes, form.in_axes
    renames = k.aliases
    node, pname = form.weight  # type: ignore[misc]
    pb = gen.panel_buffer(node, pname, PANEL, len(n_axes))
    vt = d.vector(gen.ctype, PANEL_LANES)
    v8 = d.vector(gen.ctype, VW)
    panels = ceil_div(nsz, PANEL)
    w.line(f"const {it} nb = {d.gid(0, gen.wide)};")
    w.line(f"const {it} mb = {d.gid(1, gen.wide)};")
    w.line(f"if (nb >= {gen.index_lit(panels)}) return;")  # a group wider than the panels
    clamped_rows(gen, xb, m_axes, {a: "0" for a in in_axes}, msz, PANEL_RM)
    w.line(f"{d.global_} const {pb.ctype}* pan = {pb.name} + nb * {gen.index_lit(kdim * PANEL)};")
    for i in range(PANEL_RM):
        for j in range(PANEL_RV):
            w.line(f"{vt} c{i}_{j} = ({vt})({gen.lit(0.0)});")
    with w.block(f"for ({it} k = 0; k < {kdim}; ++k)"):
        for j in range(PANEL_RV):
            at = f"pan + k * {PANEL} + {j * PANEL_LANES}"
            w.line(f"const {vt} y{j} = *({d.global_} const {vt}*)({at});")
        for i in range(PANEL_RM):
            # ``+=`` of a product: PoCL contracts it to an FMA; OpenCL's fma() built-in ran
            # 8x slower there (a library call per vector)
            w.line(f"const {gen.ctype} x{i} = {d.load(xb.dtype, f'a{i}', 'k')};")
            for j in range(PANEL_RV):
                w.line(f"c{i}_{j} += x{i} * y{j};")
    w.line(f"{gen.ctype} fin[{PANEL_RM}][{PANEL}] __attribute__((aligned(64)));")
    for i in range(PANEL_RM):
        for j in range(PANEL_RV):
            w.line(f"*(({vt}*)&fin[{i}][{j * PANEL_LANES}]) = c{i}_{j};")
    out_v = form.node.outputs[0]
    iv = gen.unique("r", "i")
    row = f"(mb * {PANEL_RM} + {iv})"
    # the bounds in the loops, not in ifs inside them: values hoisted to a loop's top (the
    # epilogue's reads) then stay inside the arrays
    rows_here = f"min({gen.index_lit(PANEL_RM)}, {msz} - mb * {PANEL_RM})"
    with w.block(f"for ({it} {iv} = 0; {iv} < {rows_here}; ++{iv})", iv):
        menv = gen.split(m_axes, row)
        if _vector_outputs(gen, nodes, form) and _lane_ops(nodes, form, renames) and not nsz % VW:
            hv = gen.unique("h", "i")
            col = f"(nb * {PANEL} + {hv} * {VW})"
            here = f"min({gen.index_lit(PANEL // VW)}, ({nsz} - nb * {PANEL}) / {VW})"
            with w.block(f"for ({it} {hv} = 0; {hv} < {here}; ++{hv})", hv):
                pv = gen.unique("pv")
                packed = f"*(({v8}*)&fin[{iv}][{hv} * {VW}])"
                if form.bias is not None:
                    bb = gen.param_buffer(*form.bias)
                    at = gen.c(bb.address(gen.split(n_axes, col)))
                    packed += f" + {d.vector_load(bb.dtype, f'{bb.name} + {at}', d.global_)}"
                gen.vec_vars.add(pv)  # values computed inside the block are vectors
                with w.block("", pv):  # (named by the vector: its chain stays inside)
                    w.line(f"const {v8} {pv} = {packed};")
                    gen.bound[out_v] = lambda index: pv
                    anywhere = {a: pv for a in k.axes()}  # lane ops read no index
                    for v in k.outputs:
                        val = gen.c(gen.load(v, anywhere))
                        out = gen.value_buffer(v, output=True)
                        last = out.axes[len(out.axes) - len(n_axes) :]
                        if tuple(renames.get(a, a) for a in last) == n_axes:
                            # the columns are the output's last axes: one vector store
                            env = {**menv, **gen.split(n_axes, col)}
                            env.update({a: env[src] for a, src in renames.items() if src in env})
                            at = f"{out.name} + {gen.c(out.address(env))}"
                            put = d.vector_store(out.dtype, at, d.global_, val)
                            if put is not None:
                                w.line(put)
                                continue
                        for lane in range(VW):
                            env = {**menv, **gen.split(n_axes, f"{col} + {lane}")}
                            env.update({a: env[src] for a, src in renames.items() if src in env})
                            put = d.store(
                                out.dtype, out.name, gen.c(out.address(env)), d.lane(val, lane)
                            )
                            w.line(put)
        else:
            lv = gen.unique("c", "i")
            col = f"(nb * {PANEL} + {lv})"
            here = f"min({gen.index_lit(PANEL)}, {nsz} - nb * {PANEL})"
            with w.block(f"for ({it} {lv} = 0; {lv} < {here}; ++{lv})", lv):
                env = {**menv, **gen.split(n_axes, col)}
                env.update({a: env[src] for a, src in renames.items() if src in env})
                s = f"fin[{iv}][{lv}]"
                gen.bound[out_v] = lambda index: (
                    f"({s} + {gen.c(gen.param(*form.bias, index))})" if form.bias else s
                )
                for v in k.outputs:
                    gen.write(v, env, [])
    from ncd_opencl.schedule import panel_group

    wg_m, wg_n = work_group(k, m_axes, n_axes, (PANEL_RM, PANEL), panel_group(g, m_axes))
    blocks = ceil_div(msz, PANEL_RM)
    gsize = (ceil_div(panels, wg_n) * wg_n, ceil_div(blocks, wg_m) * wg_m)
    return gen.source(gsize, (wg_n, wg_m), "tiled")


def _vector_epilogue(
    gen: KernelGen,
    form: LinearForm,
    sums: dict[tuple[int, int], str],
    rows: list[Any],
    cols: list[Any],
    renames: dict[Axis, Axis],
    msz: Size,
    nsz: Size,
) -> None:
    """The work-item's ``RM x RN`` sums packed into one vector, bias added, the activation
    chain evaluated once on the vector (PoCL vectorises ``exp``/``erf`` of a float8, not eight
    scalar calls), then each lane written where it is inside the output."""
    w, k = gen.w, gen.kernel
    order = [(i, j) for i in range(RM) for j in range(RN)]
    vt = gen.dialect.vector(gen.ctype, VW)
    packed = f"({vt})({', '.join(sums[ij] for ij in order)})"
    if form.bias is not None:
        bias = form.bias
        packed += f" + ({vt})({', '.join(gen.c(gen.param(*bias, cols[j][1])) for _, j in order)})"
    pv = gen.unique("pv")
    w.line(f"{vt} {pv} = {packed};")
    lane = gen.unique("lane")
    gen.vec_vars.add(lane)  # values computed inside the block below are vectors
    with w.block("", lane):
        gen.bound[form.node.outputs[0]] = lambda index: pv
        anywhere = {a: lane for a in k.axes()}  # lane ops read no index
        for v in k.outputs:
            val = gen.load(v, anywhere)
            out = gen.value_buffer(v, output=True)
            for n, (i, j) in enumerate(order):
                env = {**rows[i][1], **cols[j][1]}
                env.update({a: env[src] for a, src in renames.items() if src in env})
                guard = f"mb * {RM} + {i} < {msz} && nb * {RN} + {j} < {nsz}"
                put = gen.dialect.store(
                    out.dtype, out.name, gen.c(out.address(env)), gen.dialect.lane(gen.c(val), n)
                )
                w.line(f"if ({guard}) {put}")


def _local_tiles(
    gen: KernelGen,
    xb: Any,
    wb: Any,
    m_axes: tuple[Axis, ...],
    n_axes: tuple[Axis, ...],
    k_axes: tuple[Axis, ...],
    msz: Size,
    nsz: Size,
    kdim: Size,
) -> None:
    """The contraction loop over ``__local`` tiles: per chunk of ``KL`` contracted elements the
    group loads its rows of ``X`` and ``W`` (zero past the end of K), then each work-item
    accumulates its ``RM x RN`` block from local memory."""
    w, d = gen.w, gen.dialect
    tm, tn = RM * WG_M, RN * WG_N
    zero = {a: "0" for a in k_axes}
    w.line(f"{d.local} {gen.ctype} xs[{tm}][{KL}];")  # tiles in the arithmetic type
    w.line(f"{d.local} {gen.ctype} ws[{tn}][{KL}];")
    w.line(f"const int lid = {d.lid(1)} * {WG_N} + {d.lid(0)};")
    it = gen.itype
    cast = f"({it})" if gen.wide else ""  # the product at index width
    w.line(f"const {it} row0 = {cast}{d.grp(1)} * {tm};")
    w.line(f"const {it} col0 = {cast}{d.grp(0)} * {tn};")
    w.line(f"const int ly = {d.lid(1)} * {RM};")
    w.line(f"const int lx = {d.lid(0)} * {RN};")
    with w.block(f"for ({it} k0 = 0; k0 < {kdim}; k0 += {KL})"):
        for tile, rows, size, buf, axes, first in (
            ("xs", tm, msz, xb, m_axes, "row0"),
            ("ws", tn, nsz, wb, n_axes, "col0"),
        ):
            with w.block(f"for (int e = lid; e < {rows * KL}; e += {WG_M * WG_N})"):
                w.line(f"const int r = e / {KL}, kk = e % {KL};")
                w.line(f"const {it} g = min({first} + r, {gen.index_lit(size - 1)});")
                split = gen.split(axes, "g")
                # the weight by position (``linear("d -> d")`` holds ``d`` twice); X by axis
                base = (
                    buf.address_at([*(split[a] for a in axes), *("0" for _ in k_axes)])
                    if buf is wb
                    else buf.address({**split, **zero})
                )
                elem = d.load(buf.dtype, buf.name, f"{base} + k0 + kk")
                w.line(f"{tile}[r][kk] = k0 + kk < {kdim} ? {elem} : {gen.lit(0.0)};")
        w.line(d.barrier)
        vt = d.vector(gen.ctype, VW)
        with w.block(f"for (int k = 0; k < {KL}; k += {VW})"):
            _multiply(
                gen,
                lambda i: f"*({d.local} const {vt}*)(&xs[ly + {i}][k])",
                lambda j: f"*({d.local} const {vt}*)(&ws[lx + {j}][k])",
            )
        w.line(d.barrier)


def _multiply(gen: KernelGen, row: Any, col: Any) -> None:
    """One step of the block product: ``RM`` row vectors and ``RN`` column vectors loaded (by
    the expressions ``row(i)``, ``col(j)``), then ``c_ij += x_i * y_j``."""
    vt = gen.dialect.vector(gen.ctype, VW)
    for i in range(RM):
        gen.w.line(f"const {vt} x{i} = {row(i)};")
    for j in range(RN):
        gen.w.line(f"const {vt} y{j} = {col(j)};")
    for i in range(RM):
        for j in range(RN):
            gen.w.line(f"c{i}_{j} += x{i} * y{j};")
