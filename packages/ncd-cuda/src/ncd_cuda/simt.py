"""The CUDA-core matmul: a float32 (or float64) contraction ``C[m, n] = sum_k A[m, k] B[k, n]``
(a learned linear map, or a two-operand einsum with no batch axis) with its elementwise
epilogue, register-tiled through shared memory, exact IEEE arithmetic (no TF32).

A block of ``THREADS`` = 256 threads (16 x 16) computes a ``BM x BN`` = 64 x 64 tile of C; thread
``(ty, tx)`` owns the 4 x 4 outputs at rows ``ty + 16 i`` and columns ``tx + 16 j``: strided, so
a warp's 32 threads read 2 distinct A values (broadcast) and 16 consecutive B values (no bank
conflict) from shared memory, and its stores of a row of C are coalesced. Per chunk of ``BK`` =
16 contracted elements the block copies A's ``BM x BK`` tile and B's ``BN x BK`` tile into shared
memory k-major (``as[kk][r]``, one padding column against bank conflicts), zero past M, N and K,
so any size works (K included); then each thread runs 16 x 16 multiply-adds from registers.
Run-time sizes are kernel arguments (the grid is counted per call). The epilogue (bias,
activation, residual, the store in the output's format) is core's pull-based renderer reading
each of a thread's 16 sums. 16-bit formats take the tensor cores instead (``ncd_cuda.mma``).

Not yet: double buffering of the shared tiles, vectorised (float4) global loads, TF32
tensor cores for float32 (an opt-in precision), split-K for long contractions.
"""

from __future__ import annotations

import math
from typing import Any

from ncd.codegen import KernelGen, KernelSource
from ncd.codegen.layout import ceil_div
from ncd.codegen.plans import spread_tile
from ncd.kernel import Partition
from ncd_cuda.mma import contraction_operands, epilogue, stage

__all__ = ["block_tile", "check_tiles", "simt_choices", "simt_template"]

BM, BN, BK = 64, 64, 16  # default block tile: rows, columns; contracted elements per chunk
TM, TN = 4, 4  # outputs per thread along rows and columns
THREADS = (BM // TM) * (BN // TN)  # 256 at the default tile
MAX_THREADS = 1024  # a block's threads on every GPU since sm_20
MAX_BLOCK = 256  # rows or columns of a block tile (the shared tiles stay under 48 KB)
FORMATS = ("float32", "float64")
UNROLL = "#pragma unroll\n"
#: names the template writes literally, reserved before anything else is named
NAMES = (
    *("as", "bs", "tile", "m0", "n0", "tx", "ty", "acc", "k0", "kk", "e", "r", "gr", "gk"),
    *("av", "bv", "i", "j", "q"),
)


def _operands(gen: KernelGen) -> tuple[Any, ...] | None:
    found = contraction_operands(gen)
    if found is None:
        return None
    fmts = {str(found[1].dtype), str(found[3].dtype)}
    if len(fmts) != 1 or next(iter(fmts)) not in FORMATS:
        return None
    if gen.dialect.arith(next(iter(fmts))) != gen.cdtype:
        return None
    return found


def simt_choices(gen: KernelGen) -> list[Partition]:
    """The tiles ``simt_template`` renders the kernel with, as plan choices: a block's 64 x 64
    tile of C at level 0 and a thread's 4 x 4 at level 1 (strided by 16 inside the block), over
    the flattened row and column axes; ``[]`` for a kernel it does not render (or one whose
    sizes are left to run time: its tiles are the same, but a plan records tiles of bound
    sizes only)."""
    found = _operands(gen)
    if found is None or any(gen.known(a) is None for a in gen.kernel.axes()):
        return []
    _, _, m_axes, _, n_axes, _, _ = found
    g = gen.graph
    out: list[Partition] = []
    for axes, block, per in ((m_axes, BM, TM), (n_axes, BN, TN)):
        out += spread_tile(g, axes, block, 0) + spread_tile(g, axes, per, 1)
    return out


def simt_template(gen: KernelGen) -> KernelSource | None:
    found = _operands(gen)
    if found is None:
        return None
    gen.reserve(*NAMES)
    _, a_buf, m_axes, b_buf, n_axes, k_axes, _ = found
    w, d = gen.w, gen.dialect
    msz, nsz, kdim = (math.prod(gen.size(a) for a in axes) for axes in (m_axes, n_axes, k_axes))
    ct = gen.ctype
    bm, bn = block_tile(gen.kernel, m_axes, n_axes)  # the plan's (ncd.plan tiles=), else 64 x 64
    threads = (bm // TM) * (bn // TN)
    tiles_n = ceil_div(nsz, bn)
    tiles = ceil_div(msz, bm) * tiles_n
    w.line(f"__shared__ {ct} as[{BK}][{bm + 1}];")
    w.line(f"__shared__ {ct} bs[{BK}][{bn + 1}];")
    w.line("const int tile = blockIdx.x;")
    w.line(f"const int m0 = (tile / {tiles_n}) * {bm}, n0 = (tile % {tiles_n}) * {bn};")
    w.line(f"const int tx = threadIdx.x % {bn // TN}, ty = threadIdx.x / {bn // TN};")
    w.line(f"{ct} acc[{TM * TN}];")
    w.line(f"for (int r = 0; r < {TM * TN}; ++r) acc[r] = {gen.lit(0.0)};")
    with w.block(f"for (int k0 = 0; k0 < {kdim}; k0 += {BK})", "k0"):
        for tile, buf, axes, first, rows, block in (
            ("as", a_buf, m_axes, "m0", msz, bm),
            ("bs", b_buf, n_axes, "n0", nsz, bn),
        ):
            stage(
                gen,
                tile,
                buf,
                axes,
                k_axes,
                first,
                (rows, kdim),
                (block, BK, threads),
                value=lambda addr, buf=buf: d.load(buf.dtype, buf.name, addr),
                k_major=True,
            )
        w.line("__syncthreads();")
        with w.block(f"{UNROLL}for (int kk = 0; kk < {BK}; ++kk)", "kk"):
            w.line(f"{ct} av[{TM}], bv[{TN}];")
            with w.block(f"{UNROLL}for (int i = 0; i < {TM}; ++i)", "i"):
                w.line(f"av[i] = as[kk][ty + {bm // TM} * i];")
            with w.block(f"{UNROLL}for (int j = 0; j < {TN}; ++j)", "j"):
                w.line(f"bv[j] = bs[kk][tx + {bn // TN} * j];")
            with w.block(f"{UNROLL}for (int q = 0; q < {TM * TN}; ++q)", "q"):
                w.line(f"acc[q] += av[q / {TN}] * bv[q % {TN}];")
        w.line("__syncthreads();")
    # accumulator r is row m0 + ty + (bm / 4) (r / 4), column n0 + tx + (bn / 4) (r % 4) of C
    gm = f"(m0 + ty + {bm // TM} * (r / {TN}))"
    gn = f"(n0 + tx + {bn // TN} * (r % {TN}))"
    epilogue(gen, found, "acc", TM * TN, (gm, gn), (msz, nsz))
    return gen.source((tiles * threads,), (threads,), "simt")


def block_tile(kernel: Any, m_axes: Any, n_axes: Any) -> tuple[int, int]:
    """The block tile (rows, columns) of C: the plan's level-0 choices over the flattened row
    and column axes, else ``BM x BN``."""
    from ncd.codegen.plans import flat_tile

    bm = flat_tile(kernel, m_axes, 0, BM)
    bn = flat_tile(kernel, n_axes, 0, BN)
    return (BM if bm is None else bm), (BN if bn is None else bn)


def check_tiles(kernel: Any, gen: KernelGen) -> None:
    """``ScheduleError`` unless the kernel's chosen tiles are ones the template renders: 4 x 4
    outputs per thread (level 1) and a block tile (level 0) of multiples of 4 up to
    ``MAX_BLOCK`` rows and columns, at most ``MAX_THREADS`` threads."""
    from ncd.codegen.plans import flat_tile
    from ncd.errors import ScheduleError

    found = _operands(gen)
    if found is None:
        return
    _, _, m_axes, _, n_axes, _, _ = found
    for axes, per, what in ((m_axes, TM, "rows"), (n_axes, TN, "columns")):
        names = ", ".join(a.describe() for a in axes)
        t1 = flat_tile(kernel, axes, 1, per)
        if t1 is not None and t1 != per:
            raise ScheduleError(
                f"kernel {kernel.name}: {t1} {what} per thread over ({names}); ncd-cuda's "
                f"CUDA-core matmul computes {TM} x {TN} outputs per thread only. Fix: leave the "
                f"level-1 tile at {per}, or tile level 0 (the block)."
            )
        t0 = flat_tile(kernel, axes, 0, 64)
        if t0 is not None and (t0 % per or not per <= t0 <= MAX_BLOCK):
            raise ScheduleError(
                f"kernel {kernel.name}: a block tile of {t0} {what} over ({names}); the "
                f"CUDA-core matmul takes multiples of {per} from {per} to {MAX_BLOCK}. Fix: "
                f"e.g. 32, 64 or 128."
            )
    bm, bn = block_tile(kernel, m_axes, n_axes)
    if (bm // TM) * (bn // TN) > MAX_THREADS:
        raise ScheduleError(
            f"kernel {kernel.name}: a {bm} x {bn} block tile takes "
            f"{(bm // TM) * (bn // TN)} threads ({TM} x {TN} outputs each); a block holds at "
            f"most {MAX_THREADS}. Fix: a smaller block tile, e.g. 128 x 128."
        )
