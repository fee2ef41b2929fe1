"""The broadcast GEMM: a contraction of two values read from memory, strided in any order,
``C[m.., n..] = epilogue(sum_k A[m.., k..] B[k.., n..])``, where ``B`` stores one output axis
``n`` with unit stride.

It is what a backward pass is made of: a weight's gradient sums the tokens, the leading axis of
both operands (``dW[o, i] = sum_t dY[t, o] X[t, i]``), and ``dX = dY W`` reads the weight by
its first axis; the tiled template (``ncd_opencl.matmul``) needs the contracted axes last in
both operands and a weight laid out ``(out.., in..)``, and the pointwise renderer walks one
output per work-item at a fraction of the machine (0.8 GFLOP/s measured on a weight gradient).

Each work-item keeps ``RM x RN`` ``float8`` accumulators: ``RM`` rows of ``M`` (clamped at the
end) by ``RN`` vectors of eight consecutive ``n`` (with the other ``N`` axes flattened before
them, clamped at the end); rendered for 16 float lanes (``lanes=16``, AVX-512 under PoCL) with
``|n|`` a multiple of 16, ``RM16`` = 8 rows by ``RN`` ``float16`` vectors (107 against 51
GFLOP/s for the 8-lane block in a probe of 2048 x 1024 -> 4096 on the Intel Xeon host). Per
contracted index it loads ``RN`` vectors of ``B``, ``RM`` scalars of ``A`` broadcast over them,
and does ``RM x RN`` vector FMAs; the block then goes to private memory and the epilogue (an
elementwise chain, renames: the generic pull-based renderer) runs in loops over its rows,
vectors and lanes, bounded to the output. It takes float32 with every size known, ``|n|`` a
multiple of 8, and no axis shared by both operands and the output (a batched product renders
pointwise).
"""

from __future__ import annotations

import math

from ncd.axis import Axis
from ncd.codegen import KernelGen, KernelSource
from ncd.codegen.layout import ceil_div
from ncd.codegen.plans import outer_product
from ncd.primitives import library as L
from ncd_opencl.matmul import RM, VW, clamped_rows
from ncd_opencl.schedule import heavy_nodes

__all__ = ["outer_template"]

RN = 2  # vectors per work-item (the rows, ``RM``, and the width, ``VW``, are the tiled's)
RM16 = 8  # rows per work-item with 16-float vectors
WG = (8, 8)  # work-items per group along the vectors and the rows


UNALIGNED16 = "ncd_float16u"  # float16 at element alignment (declared in the kernel)


def row_load(gen: KernelGen, width: int, ptr: str, dtype: str) -> str:
    """``width`` consecutive float32 elements at ``ptr`` as a vector: the dialect's load for 8,
    a pointer cast to ``UNALIGNED16`` for 16."""
    if width == VW:
        return str(gen.dialect.vector_load(dtype, ptr, gen.dialect.global_))
    return f"*({gen.dialect.global_} const {UNALIGNED16}*)({ptr})"


def outer_template(gen: KernelGen, lanes: int = VW) -> KernelSource | None:
    g, k = gen.graph, gen.kernel
    if k.streamed or gen.dialect.vector_width != VW or gen.cdtype != "float32":
        return None
    renames = k.aliases
    heavy = heavy_nodes(k)
    if len(heavy) != 1 or not isinstance(heavy[0].op, L.Einsum):
        return None
    (node,) = heavy
    if not outer_product(node, gen.made_here) or len(set(node.inputs)) != 2:
        return None
    out = g.values[node.outputs[0]].axes
    a_v, b_v = node.inputs
    a_axes, b_axes = g.values[a_v].axes, g.values[b_v].axes
    contracted = [a for a in a_axes if a not in out]
    if set(contracted) != {a for a in b_axes if a not in out} or not contracted:
        return None  # an axis summed by one operand alone
    if any(a in a_axes and a in b_axes for a in out):
        return None  # a batched product
    sizes = {a: gen.known(a) for a in (*a_axes, *b_axes)}
    if any(s is None for s in sizes.values()):
        return None
    ab, bb = gen.value_buffer(a_v), gen.value_buffer(b_v)
    if g.values[b_v].dtype != "float32" or g.values[a_v].dtype != "float32":
        return None
    n = bb.axes[-1]
    if n not in out or int(sizes[n] or 0) % VW:
        return None
    width, rm = (16, RM16) if lanes == 16 and not int(sizes[n] or 0) % 16 else (VW, RM)
    for v in k.outputs:  # every output spans the product's free axes (an epilogue, renamed)
        if {renames.get(a, a) for a in g.values[v].axes} != set(out):
            return None
    m_axes = [a for a in out if a in a_axes]
    n_outer = [a for a in out if a in b_axes and a != n]
    msz = math.prod(int(sizes[a] or 1) for a in m_axes)
    per = int(sizes[n] or 0) // width  # vectors along n
    nvec = per * math.prod(int(sizes[a] or 1) for a in n_outer)
    d, w, it = gen.dialect, gen.w, gen.itype
    vt = d.vector(gen.ctype, width)
    if width != VW:  # rows of the caller's arrays: NumPy aligns them to 16 bytes only
        w.line(
            f"typedef {gen.ctype} {UNALIGNED16} __attribute__((ext_vector_type(16), aligned(4)));"
        )
    w.line(f"const {it} nb = {d.gid(0, gen.wide)};")
    w.line(f"const {it} mb = {d.gid(1, gen.wide)};")
    zero_k = {a: "0" for a in contracted}
    clamped_rows(gen, ab, m_axes, zero_k, msz, rm)
    for j in range(RN):
        nv = gen.unique(f"nv{j}")
        w.line(f"const {it} {nv} = min(nb * {RN} + {j}, {gen.index_lit(nvec - 1)});")
        env = gen.split(n_outer, f"{nv} / {per}") if n_outer else {}
        n0 = gen.unique(f"n0_{j}")
        w.line(f"const {it} {n0} = ({nv} % {per}) * {width};")
        env[n] = n0  # type: ignore[assignment]
        w.line(f"{d.global_} const {bb.ctype}* b{j} = {bb.name} + {bb.address({**env, **zero_k})};")
    for i in range(rm):
        for j in range(RN):
            w.line(f"{vt} c{i}_{j} = ({vt})({gen.lit(0.0)});")
    kenv: dict[Axis, str] = {}
    blocks = []
    for a in contracted:
        idx = gen.unique(f"k_{a.name}", "i")
        blocks.append(w.block(f"for ({it} {idx} = 0; {idx} < {sizes[a]}; ++{idx})"))
        kenv[a] = idx
    for b in blocks:
        b.__enter__()
    zero_m = {a: "0" for a in ab.axes if a not in kenv}
    zero_n = {a: "0" for a in bb.axes if a not in kenv}
    ka = gen.unique("ka", "i")
    kb = gen.unique("kb", "i")
    w.line(f"const {it} {ka} = {ab.address({**zero_m, **kenv})};")
    w.line(f"const {it} {kb} = {bb.address({**zero_n, **kenv})};")
    for j in range(RN):
        w.line(f"const {vt} y{j} = {row_load(gen, width, f'b{j} + {kb}', bb.dtype)};")
    for i in range(rm):
        w.line(f"const {gen.ctype} x{i} = {d.load(ab.dtype, f'a{i}', ka)};")
        for j in range(RN):
            w.line(f"c{i}_{j} += x{i} * y{j};")
    for b in reversed(blocks):
        b.__exit__(None, None, None)
    w.line(f"{gen.ctype} fin[{rm}][{RN * width}] __attribute__((aligned(64)));")
    for i in range(rm):
        for j in range(RN):
            w.line(f"*(({vt}*)&fin[{i}][{j * width}]) = c{i}_{j};")
    # loops bounded to the output (rows, vectors, lanes): nothing the epilogue reads is hoisted
    # past a guard
    out_v = node.outputs[0]
    iv, jv, lv = gen.unique("r", "i"), gen.unique("j", "i"), gen.unique("l", "i")
    with (
        w.block(
            f"for ({it} {iv} = 0; {iv} < min({gen.index_lit(rm)}, {msz} - mb * {rm}); ++{iv})", iv
        ),
        w.block(
            f"for ({it} {jv} = 0; {jv} < min({gen.index_lit(RN)}, {nvec} - nb * {RN}); ++{jv})", jv
        ),
        w.block(f"for (int {lv} = 0; {lv} < {width}; ++{lv})", lv),
    ):
        nv = f"(nb * {RN} + {jv})"
        env = {**gen.split(m_axes, f"(mb * {rm} + {iv})")}
        if n_outer:
            env.update(gen.split(n_outer, f"{nv} / {per}"))
        env[n] = f"({nv} % {per}) * {width} + {lv}"  # type: ignore[assignment]
        env.update({a: env[src] for a, src in renames.items() if src in env})
        value = f"fin[{iv}][{jv} * {width} + {lv}]"
        gen.bound[out_v] = lambda index: value
        for v in k.outputs:
            gen.write(v, env, [])
    gsize = (
        ceil_div(ceil_div(nvec, RN), WG[0]) * WG[0],
        ceil_div(ceil_div(msz, rm), WG[1]) * WG[1],
    )
    return gen.source(gsize, WG, "outer")
