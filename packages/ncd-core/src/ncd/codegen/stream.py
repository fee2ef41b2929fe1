"""Streamed normalised contractions: ``sum_x norm_x(s)[x] * V[x, v]`` in one pass over ``x``.

When a kernel holds a normaliser over axis ``x`` (softmax, L2) whose output only feeds a
contraction over ``x``, the normalised scores are never stored: one work-item per output row
walks ``x`` once, carrying the normaliser's accumulator and ``acc[v]`` (FlashAttention on a
Napkin, section 3: a normalised contraction ``sum a1(s) V / b(sum a2(s))`` is streamable).
The scores themselves come from the pointwise generator, so whatever feeds the normaliser
(a contraction, a scale, a causal mask) is fused. The accumulator of each normaliser is a rule
in ``STREAM_ACCUMULATORS``, keyed by op class.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

import attrs

from ncd.axis import Axis
from ncd.codegen.lower import KernelGen, KernelSource
from ncd.graph import Node
from ncd.ops import _library as L

__all__ = ["STREAM_ACCUMULATORS", "StreamAccumulator", "streamed_template"]

MAX_ACC = 256  # elements of acc[] a work-item may keep in registers


@attrs.frozen
class StreamAccumulator:
    """How one normaliser streams: ``init`` declares state, ``step(s)`` returns (rescale of the
    old acc or None, weight of this term), ``scale`` the final factor applied to acc."""

    init: Callable[[KernelGen, Node], dict[str, str]]
    step: Callable[[KernelGen, Node, dict[str, str], str], tuple[str | None, str]]
    scale: Callable[[KernelGen, Node, dict[str, str]], str]


def _softmax_init(gen: KernelGen, node: Node) -> dict[str, str]:
    # a finite start keeps exp(m - m_new) defined when the first scores are masked to -inf
    return {"m": gen.var("-3.402823466e38f", "m"), "l": gen.var("0.0f", "l")}


def _softmax_step(gen: KernelGen, node: Node, st: dict[str, str], s: str) -> tuple[str | None, str]:
    mn = gen.let(f"{gen.fn('fmax')}({st['m']}, {s})", "mnew")
    c = gen.let(f"{gen.fn('exp')}({st['m']} - {mn})", "c")
    p = gen.let(f"{gen.fn('exp')}({s} - {mn})", "p")
    gen.w.line(f"{st['l']} = {st['l']} * {c} + {p};")
    gen.w.line(f"{st['m']} = {mn};")
    return c, p


def _l2_init(gen: KernelGen, node: Node) -> dict[str, str]:
    return {"ss": gen.var("0.0f", "ss")}


def _l2_step(gen: KernelGen, node: Node, st: dict[str, str], s: str) -> tuple[str | None, str]:
    gen.w.line(f"{st['ss']} += {s} * {s};")
    return None, s


STREAM_ACCUMULATORS: dict[type, StreamAccumulator] = {
    L.Softmax: StreamAccumulator(_softmax_init, _softmax_step,
                                 lambda g, n, st: f"(1.0f / {st['l']})"),
    L.L2Norm: StreamAccumulator(
        _l2_init, _l2_step,
        lambda g, n, st: f"{g.fn('rsqrt')}({st['ss']} + {g.lit(n.op.eps)})"),  # type: ignore[attr-defined]
}


def _find(gen: KernelGen) -> tuple[Node, Node, int] | None:
    """(normaliser, contraction, index of the contraction's other input) or None."""
    g = gen.graph
    for i in gen.kernel.nodes:
        c = g.nodes[i]
        if not isinstance(c.op, L.Einsum) or len(c.inputs) != 2:
            continue
        for k, u in enumerate(c.inputs):
            j = gen.made_here.get(u)
            if j is None or type(g.nodes[j].op) not in STREAM_ACCUMULATORS:
                continue
            n = g.nodes[j]
            x = n.op.axis  # type: ignore[attr-defined]
            if x in c.op.contracted and g.consumers[u] == [i] and u not in gen.kernel.outputs:
                return n, c, 1 - k
    return None


def _causal_bound(gen: KernelGen, n: Node, x: Axis, env: dict[Axis, str]) -> str | None:
    """A causal mask whose fill is neutral for this normaliser (-inf for softmax, 0 for L2)
    zeroes every key after ``q + offset``: stop the stream there."""
    neutral = "-inf" if isinstance(n.op, L.Softmax) else "0"
    for i in gen.kernel.nodes:
        op = gen.graph.nodes[i].op
        if isinstance(op, L.CausalMask) and op.x == x and op.q in env and op.fill == neutral:
            return f"{env[op.q]} + {gen.size(op.x) - gen.size(op.q) + 1}"
    return None


def streamed_template(gen: KernelGen) -> KernelSource | None:
    found = _find(gen)
    if found is None:
        return None
    n, c, other = found
    g = gen.graph
    x: Axis = n.op.axis  # type: ignore[attr-defined]
    out = c.outputs[0]
    root = gen.kernel.outputs[-1]
    if root != out or len(gen.kernel.outputs) != 1:
        return None
    u_axes = set(g.values[n.outputs[0]].axes)
    rows = [a for a in g.values[out].axes if a in u_axes]
    vaxes = [a for a in g.values[out].axes if a not in u_axes]
    nv = math.prod(gen.size(a) for a in vaxes)
    if nv > MAX_ACC or len(c.op.contracted) != 1:  # type: ignore[attr-defined]
        return None
    total = math.prod(gen.size(a) for a in rows)
    gid = gen.unique("gid")
    w = gen.w
    w.line(f"const int {gid} = {gen.dialect.gid(0)};")
    w.line(f"if ({gid} >= {total}) return;")
    env: dict[Axis, str] = {}
    step = 1
    for a in reversed(rows):
        i = gen.unique(f"i_{a.name}", "i")
        q = gid if step == 1 else f"({gid} / {step})"
        w.line(f"const int {i} = {q if step * gen.size(a) == total else f'{q} % {gen.size(a)}'};")
        env[a] = i
        step *= gen.size(a)
    acc_rule = STREAM_ACCUMULATORS[type(n.op)]
    st = acc_rule.init(gen, n)
    acc = gen.unique("acc")
    w.line(f"float {acc}[{nv}];")
    w.line(f"for (int j = 0; j < {nv}; ++j) {acc}[j] = 0.0f;")
    bound = _causal_bound(gen, n, x, env)
    ix = gen.unique(f"i_{x.name}", "i")
    limit = str(gen.size(x)) if bound is None else f"min({gen.size(x)}, {bound})"
    with w.block(f"for (int {ix} = 0; {ix} < {limit}; ++{ix})", ix):
        xenv = {**env, x: ix}
        s = gen.load(n.inputs[0], xenv)
        rescale, p = acc_rule.step(gen, n, st, s)
        _over_v(gen, vaxes, xenv, lambda e, flat: w.line(
            f"{acc}[{flat}] = " + (f"{acc}[{flat}] * {rescale} + " if rescale else f"{acc}[{flat}] + ")
            + f"{p} * {gen.load(c.inputs[other], e)};"))
    scale = gen.let(acc_rule.scale(gen, n, st), "scale")
    ob = gen.value_buffer(out, output=True)

    def write(e: dict[Axis, str], flat: str) -> None:
        w.line(f"{ob.name}[{ob.address(e)}] = {acc}[{flat}] * {scale};")

    _over_v(gen, vaxes, env, write)
    local = 16 if total >= 16 else None
    gsize = total if local is None else -(-total // local) * local
    return gen.source((gsize,), None if local is None else (local,), "streamed")


def _over_v(gen: KernelGen, vaxes: list[Axis], env: dict[Axis, str],
            body: Callable[[dict[Axis, str], str], Any]) -> None:
    def go(e: dict[Axis, str], rest: list[Axis], flat: str) -> None:
        if not rest:
            body(e, flat or "0")
            return
        with gen.loop(rest[0]) as i:
            go({**e, rest[0]: i}, rest[1:], i if not flat else f"{flat} * {gen.size(rest[0])} + {i}")

    go(dict(env), vaxes, "")
