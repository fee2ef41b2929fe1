"""Row kernels in lane mode: a warp per row, for dialects with warp shuffles (CUDA).

A kernel whose only reduced or normalised axis ``a`` is not a grid axis (a softmax, layernorm,
rmsnorm, L2 norm or reduction over one axis, with its elementwise prologue and epilogue) is
rendered by the pointwise driver with ``KernelGen.lanes`` set: the grid holds one warp of
``Dialect.warp_size`` work-items per row, loops over ``a`` start at the lane and step by the
warp (consecutive lanes read consecutive elements), and every sum, maximum or minimum over
``a`` (``KernelGen.accumulate``) ends in a butterfly of ``Dialect.shuffle_xor`` so each lane
holds the row's total. Values without ``a`` are stored by lane 0. Without it a GPU thread would
walk a whole row alone (a layernorm over 768 elements: 768 dependent loads per thread).
"""

from __future__ import annotations

from ncd.codegen.lower import KernelGen, KernelSource
from ncd.codegen.vector import VECTOR_OPS, reduced_axes

__all__ = ["LANE_BLOCK", "lanes_template"]

LANE_BLOCK = 128  # work-items per work-group: 4 rows of 32 lanes
MIN_ROW = 64  # rows shorter than this keep a work-item per row (most lanes would idle)


def lanes_template(gen: KernelGen) -> KernelSource | None:
    d, k = gen.dialect, gen.kernel
    width = d.warp_size
    if not width or not d.shuffle_xor or k.streamed:
        return None
    axes = reduced_axes(gen)
    if len(axes) != 1:
        return None
    (a,) = axes
    known = gen.known(a)
    if known is not None and known < MIN_ROW:
        return None
    g = gen.graph
    for i in k.nodes:
        # every reduction over ``a`` must go through ``accumulate`` (an einsum's dot loop
        # would miss the butterfly); the normalisers' and Reduce's rules do
        if not isinstance(g.nodes[i].op, VECTOR_OPS):
            return None
    par = gen.grid()
    if a in par or not par:
        return None
    gen.reserve("lane")
    gen.lanes = (a, "lane", width)
    env, total = gen.open_grid(par, lanes=width)
    for v in k.outputs:
        gen.write(v, env, par)
    return gen.launch(total, "lanes", LANE_BLOCK)
