"""Tensor-core attention: a lone softmax-normalised contraction ``softmax_x(f(Q K)) V`` in
float16 or bfloat16 (the kernel core's streamed template would otherwise render), FlashAttention-2
style on ``mma.sync.m16n8k16`` with float32 accumulators.

A block of 4 warps owns 64 query rows (16 per warp) of one batch index (heads...). Each warp
keeps its rows of Q as A fragments in registers. Per chunk of ``BX`` keys the block stages K
(``BX x d``, d contiguous) and V transposed (``v x BX``) in shared memory. A warp then computes
its 16 x BX scores S = Q K^T with mma. ``f`` is the kernel's elementwise chain between the product
and the softmax (the scale, a causal mask), core's pull renderer on each score. The online
softmax runs on the fragments: row maxima and sums over the 4 lanes that share a row
(``__shfl_xor_sync`` 1 and 2), the rescale of O and l. P is rounded to the format and repacked
from S's C fragments into A fragments (two adjacent n8 tiles are one k16 tile), and O += P V
is computed with mma. The epilogue divides by l and stores through core's renderer.
Causal rows stop at the block's diagonal.

The template declines (and core's streamed template renders instead) the L2 normaliser, float32,
run-time sizes, ``d`` or ``v`` not a multiple of 16 or past 128, and products with more than one
contracted axis.
"""

from __future__ import annotations

import math
from typing import Any

from ncd.axis import Axis
from ncd.codegen import KernelGen, KernelSource
from ncd.codegen.ir import Expr
from ncd.codegen.stream import alias_x, causal_bound, normalised_operands, row_axis
from ncd.graph import Node
from ncd.kernel import Partition
from ncd.primitives import library as L
from ncd_cuda.mma import MMA_TYPES, UNROLL

__all__ = ["BQ", "BX", "flash_choices", "flash_template"]

BQ = 64  # query rows per block (16 per warp)
BX = 64  # keys per chunk
PAD = 8
THREADS = 128
NAMES = (
    "ks",
    "vt",
    "tile",
    "q0",
    "lane",
    "warp",
    "g",
    "t",
    "qa",
    "s",
    "o",
    "m",
    "l",
    "x0",
    "lim",
    "e",
    "r",
    "c",
    "u",
    "kk",
    "jv",
    "pa",
    "b0",
    "b1",
    "mx",
    "sm",
    "mn",
    "cf",
    "ps",
    "wr",
    "gr",
    "gk",
    "vv",
    "half",
    "rr",
    "kx",
    "qrow",
)


def _n(gen: KernelGen, a: Axis) -> int:
    n = gen.known(a)
    assert n is not None  # (``_fits`` declines run-time sizes)
    return n


def _score_product(gen: KernelGen, norm: Node) -> Node | None:
    """The two-operand einsum whose output the softmax's input is computed from through
    single-input elementwise ops inside the kernel."""
    g = gen.graph
    v = norm.inputs[0]
    while v in gen.made_here:
        node = g.nodes[gen.made_here[v]]
        if isinstance(node.op, L.Einsum):
            return node if len(node.inputs) == 2 and len(node.op.contracted) == 1 else None
        data = [u for u in node.inputs if g.values[u].is_float]
        if node.op.category != "elementwise" or len(data) != 1:
            return None
        v = data[0]
    return None


def _fits(gen: KernelGen) -> tuple[Any, ...] | None:
    k, g = gen.kernel, gen.graph
    if not k.streamed or gen.wide or any(gen.known(a) is None for a in k.axes()):
        return None
    kinds = k.accumulators()
    done = [
        i
        for i in k.nodes
        if kinds.get(i) == "online_softmax" and isinstance(g.nodes[i].op, L.Einsum | L.Linear)
    ]
    if len(done) != 1 or not isinstance(g.nodes[done[0]].op, L.Einsum) or len(k.outputs) != 1:
        return None  # (a second output, such as the row statistics a backward reads: core's)
    node = g.nodes[done[0]]
    parts = normalised_operands(gen, node)
    if parts is None or not isinstance(parts[0].op, L.Softmax):
        return None
    norm, other = parts
    if other in gen.made_here or len(node.op.contracted) != 1:  # type: ignore[attr-defined]
        return None
    score = _score_product(gen, norm)
    if score is None or any(u in gen.made_here for u in score.inputs):
        return None
    x = k.streamed[0]
    par = [a for a in gen.grid() if a != x]
    row = row_axis(gen, par, other)
    if row is None:
        return None
    (d,) = score.op.contracted  # type: ignore[attr-defined]
    qv = next((u for u in score.inputs if row in g.values[u].axes), None)
    if qv is None:
        return None
    kv = next(u for u in score.inputs if u != qv)
    vfree = [a for a in g.values[node.outputs[0]].axes if a not in par and gen.root(a) not in par]
    if len(vfree) != 1:
        return None
    (vax,) = vfree
    fmt = {str(g.values[u].dtype) for u in (qv, kv, other)}
    if len(fmt) != 1 or next(iter(fmt)) not in MMA_TYPES or gen.cdtype != "float32":
        return None
    dn, vn = _n(gen, d), _n(gen, vax)
    if dn % 16 or vn % 16 or dn > 128 or vn > 128:
        return None
    return node, norm, score, qv, kv, other, x, row, d, vax, par


def flash_choices(gen: KernelGen) -> list[Partition]:
    """The tiles ``flash_template`` renders the kernel with, as plan choices: ``BX`` keys a
    chunk, ``BQ`` query rows a block (level 0) and 16 a warp (level 1); ``[]`` when it
    declines the kernel."""
    found = _fits(gen)
    if found is None:
        return []
    x, row = found[6], found[7]
    return [
        Partition(x, "stream", BX, 0),
        Partition(row, "group", BQ, 0),
        Partition(row, "group", 16, 1),
    ]


def flash_template(gen: KernelGen) -> KernelSource | None:
    found = _fits(gen)
    if found is None:
        return None
    node, norm, score, qv, kv, vv_, x, row, d, vax, par = found
    gen.reserve(*NAMES)
    w, dl = gen.w, gen.dialect
    ty = MMA_TYPES[str(gen.graph.values[qv].dtype)]
    fmt = str(gen.graph.values[qv].dtype)
    store_bits = {"bfloat16": "ncd_bf16_store", "float16": "ncd_f16_store"}[fmt]
    qn, xn = _n(gen, row), _n(gen, x)
    dn, vn = _n(gen, d), _n(gen, vax)
    batch = [a for a in par if a != row]
    nb = math.prod(_n(gen, a) for a in batch)
    tiles_q = -(-qn // BQ)
    qb, kb, vb = gen.value_buffer(qv), gen.value_buffer(kv), gen.value_buffer(vv_)
    w.line(f"__shared__ __align__(16) unsigned short ks[{BX}][{dn + PAD}];")
    w.line(f"__shared__ __align__(16) unsigned short vt[{vn}][{BX + PAD}];")
    w.line("const int tile = blockIdx.x;")
    w.line(f"const int q0 = (tile % {tiles_q}) * {BQ};")
    benv: dict[Axis, Expr | str] = {}
    if batch:
        benv.update(gen.split(batch, f"(tile / {tiles_q})"))
    w.line("const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;")
    w.line("const int g = lane / 4, t = lane % 4;")
    w.line("const int wr = q0 + warp * 16;  // the warp's first query row")
    # Q fragments, rows clamped (rows past the end are computed and never stored)
    kq = dn // 16
    w.line(f"unsigned qa[{kq}][4];")

    def pair(buf: Any, env_lo: dict[Axis, Expr | str], env_hi: dict[Axis, Expr | str]) -> str:
        lo = f"{buf.name}[{buf.address(env_lo)}]"
        hi = f"{buf.name}[{buf.address(env_hi)}]"
        return f"((unsigned){lo} | ((unsigned){hi} << 16))"

    with w.block(f"{UNROLL}for (int kk = 0; kk < {kq}; ++kk)", "kk"):
        for reg, (dr, dk) in enumerate(((0, 0), (8, 0), (0, 8), (8, 8))):
            qrow = f"min(wr + g + {dr}, {qn - 1})"
            base = {**benv, row: qrow}
            lo = {**base, d: f"(kk * 16 + 2 * t + {dk})"}
            hi = {**base, d: f"(kk * 16 + 2 * t + {dk} + 1)"}
            w.line(f"qa[kk][{reg}] = {pair(qb, lo, hi)};")
    lowest = dl.lowest[gen.cdtype]
    w.line(f"float m[2] = {{{lowest}, {lowest}}}, l[2] = {{0.0f, 0.0f}};")
    no = vn // 8
    w.line(f"float o[{no}][4];")
    w.line(f"for (int jv = 0; jv < {no}; ++jv) o[jv][0] = o[jv][1] = o[jv][2] = o[jv][3] = 0.0f;")
    bound = causal_bound(gen, norm, x, {**benv, row: f"(q0 + {BQ - 1})"})
    limit = str(xn) if bound is None else f"min({xn}, {bound})"
    w.line(f"const int lim = {limit};")
    ns = BX // 8
    with w.block(f"for (int x0 = 0; x0 < lim; x0 += {BX})", "x0"):
        # stage K [BX][d] and V transposed [v][BX]; keys past the end are zero
        with w.block(f"for (int e = threadIdx.x; e < {BX * dn}; e += {THREADS})", "e"):
            w.line(f"const int kx = e / {dn}, gk = e % {dn};")
            env = {**benv, **alias_x(gen, x, "(x0 + kx)"), d: "gk"}
            w.line(f"ks[kx][gk] = x0 + kx < {xn} ? {kb.name}[{kb.address(env)}] : 0;")
        with w.block(f"for (int e = threadIdx.x; e < {BX * vn}; e += {THREADS})", "e"):
            w.line(f"const int kx = e / {vn}, gk = e % {vn};")
            env = {**benv, **alias_x(gen, x, "(x0 + kx)"), vax: "gk"}
            w.line(f"vt[gk][kx] = x0 + kx < {xn} ? {vb.name}[{vb.address(env)}] : 0;")
        w.line(dl.barrier)
        w.line(f"float s[{ns * 4}];")
        w.line(f"for (int u = 0; u < {ns * 4}; ++u) s[u] = 0.0f;")
        with (
            w.block(f"{UNROLL}for (int kk = 0; kk < {kq}; ++kk)", "kk"),
            w.block(f"{UNROLL}for (int c = 0; c < {ns}; ++c)", "c"),
        ):
            w.line("const unsigned b0 = *(const unsigned*)&ks[c * 8 + g][kk * 16 + 2 * t];")
            w.line("const unsigned b1 = *(const unsigned*)&ks[c * 8 + g][kk * 16 + 2 * t + 8];")
            w.line(
                f"ncd_mma_{ty}(s[c * 4], s[c * 4 + 1], s[c * 4 + 2], s[c * 4 + 3], "
                "qa[kk][0], qa[kk][1], qa[kk][2], qa[kk][3], b0, b1);"
            )
        # f(score) on every element: element u is row wr + g + 8 (u % 4 / 2), key x0 + 8 (u / 4)
        # + 2t + u % 2 (spelled out so core keeps what it derives from them in the loop)
        qrow = "(wr + g + ((u % 4) / 2) * 8)"
        key = "(x0 + (u / 4) * 8 + 2 * t + u % 2)"
        gen.bound[score.outputs[0]] = lambda index: "s[u]"
        with w.block(f"{UNROLL}for (int u = 0; u < {ns * 4}; ++u)", "u"):
            env = {**benv, row: f"min({qrow}, {qn - 1})", **alias_x(gen, x, key)}
            val = gen.load(norm.inputs[0], env)
            w.line(f"s[u] = {key} < lim ? {val} : -{dl.infinity[gen.cdtype]};")
        # online softmax per row half (rows g and g + 8), over the 4 lanes holding a row
        with w.block(f"{UNROLL}for (int half = 0; half < 2; ++half)", "half"):
            w.line("float mx = m[half];")
            w.line(
                f"for (int c = 0; c < {ns}; ++c) mx = fmax(mx, fmax(s[c * 4 + half * 2], "
                "s[c * 4 + half * 2 + 1]));"
            )
            w.line("mx = fmax(mx, __shfl_xor_sync(0xffffffffu, mx, 1));")
            w.line("mx = fmax(mx, __shfl_xor_sync(0xffffffffu, mx, 2));")
            w.line("const float cf = exp(m[half] - mx);")
            w.line("float ps = 0.0f;")
            with w.block(f"for (int c = 0; c < {ns}; ++c)", "c"):
                # P in float32 here (l sums it unrounded); it is rounded to the operand format
                # when packed into the A fragments below
                w.line("float* rr = &s[c * 4 + half * 2];")
                w.line("rr[0] = exp(rr[0] - mx);")
                w.line("rr[1] = exp(rr[1] - mx);")
                w.line("ps += rr[0] + rr[1];")
            w.line("l[half] = l[half] * cf + ps;")  # lane partial sums: reduced at the end
            w.line("m[half] = mx;")
            w.line(
                f"for (int jv = 0; jv < {no}; ++jv) {{ o[jv][half * 2] *= cf; "
                "o[jv][half * 2 + 1] *= cf; }"
            )
        # O += P V: two adjacent n8 tiles of P are one k16 A fragment
        with w.block(f"{UNROLL}for (int kk = 0; kk < {BX // 16}; ++kk)", "kk"):
            w.line("unsigned pa[4];")
            for reg, (tile_j, at) in enumerate(((0, 0), (0, 2), (1, 0), (1, 2))):
                first = f"s[(2 * kk + {tile_j}) * 4 + {at}]"
                second = f"s[(2 * kk + {tile_j}) * 4 + {at + 1}]"
                w.line(
                    f"pa[{reg}] = (unsigned){store_bits}({first}) | "
                    f"((unsigned){store_bits}({second}) << 16);"
                )
            with w.block(f"{UNROLL}for (int jv = 0; jv < {no}; ++jv)", "jv"):
                w.line("const unsigned b0 = *(const unsigned*)&vt[jv * 8 + g][kk * 16 + 2 * t];")
                w.line(
                    "const unsigned b1 = *(const unsigned*)&vt[jv * 8 + g][kk * 16 + 2 * t + 8];"
                )
                w.line(
                    f"ncd_mma_{ty}(o[jv][0], o[jv][1], o[jv][2], o[jv][3], "
                    "pa[0], pa[1], pa[2], pa[3], b0, b1);"
                )
        w.line(dl.barrier)
    # each lane summed its own columns: the row's l is the quad's total
    with w.block(f"{UNROLL}for (int half = 0; half < 2; ++half)", "half"):
        w.line("l[half] += __shfl_xor_sync(0xffffffffu, l[half], 1);")
        w.line("l[half] += __shfl_xor_sync(0xffffffffu, l[half], 2);")
    vcol = "(jv * 8 + 2 * t + (r % 2))"
    qout = "(wr + g + (r / 2) * 8)"
    gen.bound[node.outputs[0]] = lambda index: "(o[jv][r] / l[r / 2])"
    with (
        w.block(f"{UNROLL}for (int jv = 0; jv < {no}; ++jv)", "jv"),
        w.block(f"{UNROLL}for (int r = 0; r < 4; ++r)", "r"),
        w.block(f"if ({qout} < {qn})", "r"),  # (binds r: epilogue reads stay inside)
    ):
        env = {**benv, row: qout, vax: vcol}
        for a in gen.kernel.axes():  # renamed copies of the row and value axes
            if a not in env and gen.root(a) in env:
                env[a] = env[gen.root(a)]
        for v in gen.kernel.outputs:
            gen.write(v, env, [])
    return gen.source((nb * tiles_q * THREADS,), (THREADS,), "flash")
