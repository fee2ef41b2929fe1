"""The tensor-core template: a float16 or bfloat16 contraction ``C[m, n] = sum_k A[m, k] B[k, n]``
(a learned linear map, or a two-operand einsum with no batch axis) with its elementwise
epilogue, on ``mma.sync.aligned.m16n8k16`` with float32 accumulators (sm_80 and later).

A block of 4 warps computes a ``BM x BN`` tile of C; warp ``(wm, wn)`` of the 2 x 2 arrangement
owns a 32 x 32 quarter: 2 x 4 mma tiles of 16 x 8, 32 accumulators per thread. Per chunk of
``BK`` contracted elements the block copies its tile of A (``BM x BK``) and of B (``BN x BK``,
k contiguous whatever B's storage order) into shared memory as raw 16-bit values (rows past M
or N and k past K are zero), then each warp loads its fragments with 32-bit shared reads (two
consecutive k per register, the lower k in the lower half) and issues 16 mma per chunk. The
epilogue (bias, activation, residual, the store in the output's format) is core's pull-based
renderer reading each accumulator, one unrolled loop over a thread's 32 results.

Fragment layout (PTX ISA, m16n8k16 with 16-bit A/B): lane ``l``, ``g = l / 4``, ``t = l % 4``;
A registers a0..a3 hold (row g, k 2t..2t+1), (g+8, 2t..), (g, 2t+8..), (g+8, 2t+8..); B
registers b0, b1 hold (k 2t..2t+1, col g), (k 2t+8.., col g); C holds (g, 2t), (g, 2t+1),
(g+8, 2t), (g+8, 2t+1).

Not yet: ``cp.async`` double buffering, ``wgmma``/TMA on sm_90 (sm_90 runs the same mma.sync),
batched contractions, run-time sizes (those kernels go to the pointwise renderer).
"""

from __future__ import annotations

import math
from typing import Any

from ncd.axis import Axis
from ncd.codegen import KernelGen, KernelSource
from ncd.codegen.plans import spread_tile
from ncd.kernel import Partition
from ncd.primitives import library as L

__all__ = [
    "BK",
    "BM",
    "BN",
    "contraction_operands",
    "epilogue",
    "mma_choices",
    "mma_template",
    "stage",
]

BM, BN, BK = 64, 64, 32  # block tile: rows, columns, contracted elements per chunk
PAD = 8  # 16-bit elements of padding per shared row (spreads a warp's rows over the banks)
THREADS = 128
MMA_TYPES = {"float16": "f16", "bfloat16": "bf16"}
UNROLL = "#pragma unroll\n"
#: the names this template writes; reserved in the kernel's namespace before anything else
#: is named, so an epilogue's temporaries can never shadow one
NAMES = (
    "as",
    "bs",
    "tile",
    "m0",
    "n0",
    "lane",
    "warp",
    "wm",
    "wn",
    "g",
    "t",
    "c",
    "k0",
    "e",
    "r",
    "kk",
    "gr",
    "gk",
    "ks",
    "a",
    "b",
    "i",
    "j",
    "q",
    "col",
    "gm",
    "gn",
)


def _operands(gen: KernelGen) -> tuple[Any, ...] | None:
    """(node, A buffer, A's row axes, B buffer, B's column axes, contracted axes, bias?) when the
    kernel is one 16-bit contraction plus elementwise ops, else ``None``."""
    found = contraction_operands(gen)
    if found is None:
        return None
    fmt = {str(found[1].dtype), str(found[3].dtype)}
    if len(fmt) != 1 or next(iter(fmt)) not in MMA_TYPES or gen.cdtype != "float32":
        return None
    if any(gen.known(a) is None for a in gen.kernel.axes()):
        return None
    return found


def contraction_operands(gen: KernelGen) -> tuple[Any, ...] | None:
    """(node, A buffer, A's row axes, B buffer, B's column axes, contracted axes, bias?) when the
    kernel is one contraction ``C[m, n] = sum_k A[m, k] B[k, n]`` (a learned linear map, or a
    two-operand einsum with no batch axis) plus elementwise ops writing ``C``'s axes, with
    32-bit indices; else ``None``. (The matmul templates then check formats and sizes.)"""
    g, k = gen.graph, gen.kernel
    renames = k.aliases
    nodes = [g.nodes[i] for i in k.nodes]
    heavy = [
        n
        for n in nodes
        if n.op.category != "elementwise"
        and not (n.op.category == "view" and n.op.out_axes[0] in renames)  # type: ignore[attr-defined]
    ]
    if len(heavy) != 1 or k.streamed:
        return None
    node = heavy[0]
    op = node.op
    if isinstance(op, L.Linear):
        x = node.inputs[0]
        if x in gen.made_here or set(op.in_axes) & set(op.out_axes):
            return None
        m_axes, n_axes, k_axes = tuple(node.loop), tuple(op.out_axes), tuple(op.in_axes)
        a_buf, b_buf = gen.value_buffer(x), gen.param_buffer(node, "weight")
        if any(a not in m_axes and a not in k_axes for a in g.values[x].axes):
            return None
        bias = bool(op.bias)
    elif isinstance(op, L.Einsum) and len(node.inputs) == 2:
        if any(v in gen.made_here for v in node.inputs):
            return None
        a_v, b_v = node.inputs
        k_axes = tuple(op.contracted)
        a_axes, b_axes = g.values[a_v].axes, g.values[b_v].axes
        m_axes = tuple(a for a in a_axes if a not in k_axes)
        n_axes = tuple(a for a in b_axes if a not in k_axes)
        if not k_axes or set(m_axes) & set(n_axes) or not m_axes or not n_axes:
            return None  # a batched product or an outer product: the pointwise renderer
        if set(g.values[node.outputs[0]].axes) != set(m_axes) | set(n_axes):
            return None
        a_buf, b_buf = gen.value_buffer(a_v), gen.value_buffer(b_v)
        bias = False
    else:
        return None
    if gen.wide:
        return None
    full = set(m_axes) | set(n_axes)
    for v in k.outputs:
        if {renames.get(a, a) for a in g.values[v].axes} != full:
            return None
    return node, a_buf, m_axes, b_buf, n_axes, k_axes, bias


WARP_TILE = 32  # rows and columns of C per warp (2 x 4 mma tiles of 16 x 8)


def mma_choices(gen: KernelGen) -> list[Partition]:
    """The tiles ``mma_template`` renders the kernel with, as plan choices: a block's 64 x 64
    tile of C at level 0 and a warp's 32 x 32 at level 1 (the register tile whose operands one
    warp loads from shared memory), over the flattened row and column axes; ``[]`` for a
    kernel the template does not render."""
    found = _operands(gen)
    if found is None:
        return []
    _, _, m_axes, _, n_axes, _, _ = found
    g = gen.graph
    out: list[Partition] = []
    for axes, block in ((m_axes, BM), (n_axes, BN)):
        out += spread_tile(g, axes, block, 0) + spread_tile(g, axes, WARP_TILE, 1)
    return out


def _known(gen: KernelGen, a: Axis) -> int:
    n = gen.known(a)
    assert n is not None  # (``_operands`` declines kernels with run-time sizes)
    return n


def stage(
    gen: KernelGen,
    tile: str,
    buf: Any,
    rows_axes: tuple[Axis, ...],
    k_axes: tuple[Axis, ...],
    first: str,
    shape: tuple[Any, Any],
    tiles: tuple[int, int, int],
    value: Any = None,
    k_major: bool = False,
) -> None:
    """Copy ``rows x bk`` elements of ``buf`` (rows from ``first``, k from ``k0``; ``tiles`` =
    (rows, bk, threads), ``shape`` = (rows of ``buf``, K)) into shared ``tile`` as
    ``tile[r][kk]`` (``k_major``: ``tile[kk][r]``), zero past the ends; consecutive threads take
    consecutive addresses in global memory. ``value(text)`` converts the element read."""
    w = gen.w
    rows, bk, threads = tiles
    nrows, kdim = shape
    k_last = bool(buf.axes) and buf.axes[-1] in k_axes
    with w.block(f"for (int e = threadIdx.x; e < {rows * bk}; e += {threads})", "e"):
        if k_last:  # k has unit stride: threads walk k fastest
            w.line(f"const int r = e / {bk}, kk = e % {bk};")
        else:  # the rows have unit stride: threads walk rows fastest
            w.line(f"const int r = e % {rows}, kk = e / {rows};")
        w.line(f"const int gr = {first} + r, gk = k0 + kk;")
        addr = buf.address({**gen.split(rows_axes, "gr"), **gen.split(k_axes, "gk")})
        read = f"{buf.name}[{addr}]" if value is None else value(addr)
        at = "[kk][r]" if k_major else "[r][kk]"
        w.line(f"{tile}{at} = gr < {nrows} && gk < {kdim} ? {read} : 0;")


def epilogue(
    gen: KernelGen,
    found: tuple[Any, ...],
    acc: str,
    count: int,
    at: tuple[str, str],
    shape: tuple[Any, Any],
) -> None:
    """Write a matmul's outputs from a thread's ``count`` sums ``acc[r]``: accumulator ``r``
    sits at row ``at[0]`` and column ``at[1]`` of C (expressions of ``r``, spelled out so core's
    hoisting keeps what the epilogue computes from them inside the loop), masked to ``shape``.
    The guard binds ``r`` too, so what the epilogue reads at (row, column) (a bias, a
    residual) is computed inside it, never at a masked position past the arrays."""
    node, _, m_axes, _, n_axes, _, bias = found
    w, k = gen.w, gen.kernel
    gm, gn = at
    with (
        w.block(f"{UNROLL}for (int r = 0; r < {count}; ++r)", "r"),
        w.block(f"if ({gm} < {shape[0]} && {gn} < {shape[1]})", "r"),
    ):
        env = {**gen.split(m_axes, gm), **gen.split(n_axes, gn)}
        env.update({a: env[src] for a, src in k.aliases.items() if src in env})
        gen.bound[node.outputs[0]] = lambda index: (
            f"({acc}[r] + {gen.param(node, 'bias', index)})" if bias else f"{acc}[r]"
        )
        for v in k.outputs:
            gen.write(v, env, [])


def mma_template(gen: KernelGen) -> KernelSource | None:
    gen.reserve(*NAMES)  # (the buffers are ``in0``, ``w_...``, ``out2``: never one of these)
    found = _operands(gen)
    if found is None:
        return None
    _, a_buf, m_axes, b_buf, n_axes, k_axes, _ = found
    w = gen.w
    msz, nsz, kdim = (math.prod(_known(gen, a) for a in axes) for axes in (m_axes, n_axes, k_axes))
    ty = MMA_TYPES[str(a_buf.dtype)]
    tiles_n = -(-nsz // BN)
    tiles = -(-msz // BM) * tiles_n
    w.line(f"__shared__ __align__(16) unsigned short as[{BM}][{BK + PAD}];")
    w.line(f"__shared__ __align__(16) unsigned short bs[{BN}][{BK + PAD}];")
    w.line("const int tile = blockIdx.x;")
    w.line(f"const int m0 = (tile / {tiles_n}) * {BM}, n0 = (tile % {tiles_n}) * {BN};")
    w.line("const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;")
    w.line("const int wm = (warp / 2) * 32, wn = (warp % 2) * 32;")
    w.line("const int g = lane / 4, t = lane % 4;")
    w.line("float c[32];")
    w.line("for (int r = 0; r < 32; ++r) c[r] = 0.0f;")
    with w.block(f"for (int k0 = 0; k0 < {kdim}; k0 += {BK})", "k0"):
        stage(gen, "as", a_buf, m_axes, k_axes, "m0", (msz, kdim), (BM, BK, THREADS))
        stage(gen, "bs", b_buf, n_axes, k_axes, "n0", (nsz, kdim), (BN, BK, THREADS))
        w.line("__syncthreads();")
        with w.block(f"{UNROLL}for (int ks = 0; ks < {BK}; ks += 16)", "ks"):
            w.line("unsigned a[2][4], b[4][2];")
            with w.block(f"{UNROLL}for (int i = 0; i < 2; ++i)", "i"):
                w.line("const int r = wm + i * 16 + g;")
                for reg, (dr, dk) in enumerate(((0, 0), (8, 0), (0, 8), (8, 8))):
                    w.line(f"a[i][{reg}] = *(const unsigned*)&as[r + {dr}][ks + 2 * t + {dk}];")
            with w.block(f"{UNROLL}for (int j = 0; j < 4; ++j)", "j"):
                w.line("const int col = wn + j * 8 + g;")
                w.line("b[j][0] = *(const unsigned*)&bs[col][ks + 2 * t];")
                w.line("b[j][1] = *(const unsigned*)&bs[col][ks + 2 * t + 8];")
            with w.block(f"{UNROLL}for (int q = 0; q < 8; ++q)", "q"):
                w.line("const int i = q / 4, j = q % 4;")
                w.line(
                    f"ncd_mma_{ty}(c[q * 4], c[q * 4 + 1], c[q * 4 + 2], c[q * 4 + 3], "
                    "a[i][0], a[i][1], a[i][2], a[i][3], b[j][0], b[j][1]);"
                )
        w.line("__syncthreads();")
    # the epilogue: accumulator q*4+e is row wm + (q/4)*16 + g + (e/2)*8, column wn +
    # (q%4)*8 + 2t + e%2 of the block's tile
    gm = "(m0 + wm + (r / 16) * 16 + g + ((r % 4) / 2) * 8)"
    gn = "(n0 + wn + ((r / 4) % 4) * 8 + 2 * t + r % 2)"
    epilogue(gen, found, "c", 32, (gm, gn), (msz, nsz))
    return gen.source((tiles * THREADS,), (THREADS,), "mma")
