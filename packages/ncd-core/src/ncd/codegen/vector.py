"""Row kernels with explicit vector types: normalisers, reductions and elementwise chains over
one contiguous axis.

A kernel whose only reduced or normalised axis ``a`` (for an elementwise kernel: its output's
last axis) is the unit-stride axis of every array it touches is rendered by the pointwise
driver in *vector mode*: loops over ``a`` step by the dialect's vector width, reads and writes
along ``a`` are vector loads and stores, accumulators are vectors reduced across lanes once per
row. On PoCL's CPU device this is what vectorises the exponentials of a softmax
(``exp(float8)`` runs the vectorised library routine; the scalar loop does not vectorise):
measured 6-8x faster on 4096x4096 (docs/opencl.md).
"""

from __future__ import annotations

from ncd.axis import Axis
from ncd.codegen.lower import KernelGen, KernelSource
from ncd.primitives import library as L

__all__ = ["VECTOR_OPS", "has_vector_rule", "reduced_axes", "vector_template"]

#: op classes whose rules produce valid code on vector operands.
VECTOR_OPS: tuple[type, ...] = (
    L.Unary,
    L.Activation,
    L.Binary,
    L.Scalar,
    L.Scale,
    L.Dropout,
    L.Softmax,
    L.L2Norm,
    L.LayerNorm,
    L.RMSNorm,
    L.Reduce,
    L.Cast,  # the identity on the arithmetic type; rounding is the dialect's, per lane
)


def has_vector_rule(op: object) -> bool:
    """Whether ``op``'s rule is valid on vector operands: its class is in ``VECTOR_OPS``, and it
    is not ``pow``, ``logsumexp`` (its finite-shift select), ``floordiv``/``mod`` (their
    selects) nor seeded dropout (whose mask
    hashes each element's scalar position)."""
    return (
        isinstance(op, VECTOR_OPS)
        and getattr(op, "fn", "") not in ("pow", "logsumexp", "floordiv", "mod")
        and getattr(op, "seed", None) is None
    )


def reduced_axes(gen: KernelGen) -> set[Axis]:
    """The axes the kernel's normalisers and reductions reduce over."""
    out: set[Axis] = set()
    for i in gen.kernel.nodes:
        op = gen.graph.nodes[i].op
        if op.category in ("normaliser", "reduction"):
            out.update(a for g in op.signature()[0] for a in g)
    return out


def vector_template(gen: KernelGen) -> KernelSource | None:
    width = gen.dialect.vector_width
    k = gen.kernel
    if not width or k.streamed or gen.cdtype != "float32":
        return None
    axes = reduced_axes(gen)
    if not axes:  # elementwise: vectorise along the last output's unit-stride axis
        last = k.outputs[-1]
        order = gen.layouts.get(last, gen.graph.values[last].axes)
        axes = {order[-1]} if order else set()
    if len(axes) != 1:
        return None
    (a,) = axes
    known = gen.known(a)  # a run-time length: whole vectors, then a scalar tail
    if known is not None and known % width:
        return None
    g = gen.graph
    for i in k.nodes:
        op = g.nodes[i].op
        if not has_vector_rule(op):
            return None
    # every array holding ``a`` must hold it last (unit stride, aligned rows)
    for v in (*k.inputs, *k.outputs):
        order = gen.layouts.get(v, g.values[v].axes)
        if a in order and order[-1] != a:
            return None
        if not gen.dialect.vectorises(g.values[v].dtype):
            return None  # a format without vector loads and stores in this dialect
    for i in k.nodes:
        for p in g.nodes[i].op.params():
            if (a in p.axes and p.axes[-1] != a) or not gen.dialect.vectorises(p.dtype):
                return None
    gen.vec = a  # a work-item walks the rows of ``a`` (``serial_axes``)
    if a in gen.grid():
        return None
    return gen.render("vector")
