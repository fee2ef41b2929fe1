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
from collections.abc import Callable, Mapping
from typing import Any

import attrs

from ncd.axis import Axis
from ncd.codegen.lower import KernelGen, KernelSource
from ncd.graph import Node
from ncd.ops import _library as L

__all__ = ["STREAM_ACCUMULATORS", "StreamAccumulator", "streamed_template"]



@attrs.frozen
class StreamAccumulator:
    """How one normaliser streams: ``init`` declares state, ``step(s)`` returns (rescale of the
    old acc or None, weight of this term), ``scale`` the final factor applied to acc.
    ``block(sc, n)`` does a chunk at once: it turns the scores ``sc[0..n)`` into weights in
    place and returns the rescale of the old acc (or None); ``pad`` fills scores past the end.
    """

    init: Callable[[KernelGen, Node], dict[str, str]]
    step: Callable[[KernelGen, Node, dict[str, str], str], tuple[str | None, str]]
    scale: Callable[[KernelGen, Node, dict[str, str]], str]
    block: Callable[[KernelGen, Node, dict[str, str], str, int], str | None] | None = None
    pad: str = "0.0f"


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


def _softmax_block(gen: KernelGen, node: Node, st: dict[str, str], sc: str, n: int) -> str:
    # one max and one rescale per chunk; the chunk's exponentials form a loop PoCL vectorises
    w = gen.w
    mb = gen.var(st["m"], "mb")
    w.line(f"for (int t = 0; t < {n}; ++t) {mb} = {gen.fn('fmax')}({mb}, {sc}[t]);")
    c = gen.let(f"{gen.fn('exp')}({st['m']} - {mb})", "c")
    ls = gen.var("0.0f", "ls")
    w.line(f"for (int t = 0; t < {n}; ++t) {{ {sc}[t] = {gen.fn('exp')}({sc}[t] - {mb}); "
           f"{ls} += {sc}[t]; }}")
    w.line(f"{st['l']} = {st['l']} * {c} + {ls};")
    w.line(f"{st['m']} = {mb};")
    return c


def _l2_block(gen: KernelGen, node: Node, st: dict[str, str], sc: str, n: int) -> None:
    gen.w.line(f"for (int t = 0; t < {n}; ++t) {st['ss']} += {sc}[t] * {sc}[t];")
    return None


def _l2_init(gen: KernelGen, node: Node) -> dict[str, str]:
    return {"ss": gen.var("0.0f", "ss")}


def _l2_step(gen: KernelGen, node: Node, st: dict[str, str], s: str) -> tuple[str | None, str]:
    gen.w.line(f"{st['ss']} += {s} * {s};")
    return None, s


STREAM_ACCUMULATORS: dict[type, StreamAccumulator] = {
    L.Softmax: StreamAccumulator(_softmax_init, _softmax_step,
                                 lambda g, n, st: f"(1.0f / {st['l']})", _softmax_block,
                                 "-3.402823466e38f"),
    L.L2Norm: StreamAccumulator(
        _l2_init, _l2_step,
        lambda g, n, st: f"{g.fn('rsqrt')}({st['ss']} + {g.lit(n.op.eps)})",  # type: ignore[attr-defined]
        _l2_block, "0.0f"),
}


COMPLETING = frozenset({"sum", "mean", "max", "min", "online_softmax", "l2"})
MAX_ACC_ELEMS = 4096  # a work-item's accumulators live in private memory (the stack on a CPU)


def _causal_bound(gen: KernelGen, n: Node, x: Axis, env: dict[Axis, str]) -> str | None:
    """A causal mask whose fill is neutral for this normaliser (-inf for softmax, 0 for L2)
    zeroes every key after ``q + offset``: stop the stream there."""
    neutral = "-inf" if isinstance(n.op, L.Softmax) else "0"
    for i in gen.kernel.nodes:
        op = gen.graph.nodes[i].op
        if isinstance(op, L.CausalMask) and op.x == x and op.q in env and op.fill == neutral:
            return f"{env[op.q]} + {gen.size(op.x) - gen.size(op.q) + 1}"
    return None


class _Acc:
    """One completing node's accumulator array over the output axes a work-item does not fix."""

    def __init__(self, gen: KernelGen, node: Node, env: dict[Axis, str]) -> None:
        self.node = node
        out = node.outputs[0]
        self.free = [a for a in gen.graph.values[out].axes if a not in env]
        self.n = math.prod(gen.size(a) for a in self.free)
        self.name = gen.unique("acc")
        self.state: dict[str, str] = {}
        self.norm: Node | None = None

    def flat(self, gen: KernelGen, index: Mapping[Axis, str]) -> str:
        expr = ""
        for a in self.free:
            expr = index[a] if not expr else f"({expr}) * {gen.size(a)} + {index[a]}"
        return expr or "0"


def _over(gen: KernelGen, axes: list[Axis], env: dict[Axis, str],
          body: Callable[[dict[Axis, str]], Any]) -> None:
    def go(e: dict[Axis, str], rest: list[Axis]) -> None:
        if not rest:
            body(e)
            return
        with gen.loop(rest[0]) as i:
            go({**e, rest[0]: i}, rest[1:])

    go(dict(env), axes)


def _term(gen: KernelGen, node: Node, x: Axis, e: dict[Axis, str]) -> str:
    """The product a contraction adds at one index of every contracted axis."""
    op = node.op
    if isinstance(op, L.Linear):
        return f"{gen.load(node.inputs[0], e)} * {gen.param(node, 'weight', e)}"
    return " * ".join(gen.load(v, e) for v in node.inputs)


def _contracted(node: Node) -> tuple[Axis, ...]:
    op = node.op
    if isinstance(op, L.Linear):
        return op.in_axes
    if isinstance(op, L.Einsum):
        return op.contracted
    return op.axes_  # type: ignore[attr-defined, no-any-return]


def streamed_template(gen: KernelGen) -> KernelSource | None:
    """Render a kernel with a stream partition: grid over its group axes, one loop over the
    streamed axis carrying every completing node's accumulator, then the epilogue."""
    k = gen.kernel
    if not k.streamed:
        return None
    x = k.streamed[0]
    kinds = k.accumulators()
    g = gen.graph
    done = [i for i in k.nodes if kinds.get(i) in COMPLETING
            and isinstance(g.nodes[i].op, L.Einsum | L.Linear | L.Reduce)]
    if not done:
        return None
    par = [a for a in gen.grid() if a != x]
    env, total = gen.open_grid(par)
    accs = []
    w = gen.w
    for i in done:
        node = g.nodes[i]
        acc = _Acc(gen, node, env)
        if acc.n > MAX_ACC_ELEMS:
            return None
        if kinds[i] in ("online_softmax", "l2"):
            norms = [v for v in node.inputs if v in gen.made_here
                     and type(g.nodes[gen.made_here[v]].op) in STREAM_ACCUMULATORS]
            if len(norms) != 1 or len(node.inputs) != 2:
                return None  # homogeneous maps between normaliser and contraction: pointwise
            acc.norm = g.nodes[gen.made_here[norms[0]]]
            acc.state = STREAM_ACCUMULATORS[type(acc.norm.op)].init(gen, acc.norm)
        init = {"max": f"-{gen.dialect.inf}", "min": gen.dialect.inf}.get(
            getattr(node.op, "fn", ""), "0.0f")
        w.line(f"float {acc.name}[{acc.n}];")
        w.line(f"for (int j = 0; j < {acc.n}; ++j) {acc.name}[j] = {init};")
        accs.append(acc)
    limit = str(gen.size(x))
    if len(accs) == 1 and accs[0].norm is not None:
        bound = _causal_bound(gen, accs[0].norm, x, env)
        limit = limit if bound is None else f"min({limit}, {bound})"
    chunk = _chunk(gen, x, accs)
    if chunk:
        _chunked(gen, accs[0], x, env, limit, chunk)
        for acc in accs:
            _bind(gen, acc)
        for v in k.outputs:
            gen.write(v, env, par)
        return gen.launch(total, "streamed", 16)
    ix = gen.unique(f"i_{x.name}", "i")
    with w.block(f"for (int {ix} = 0; {ix} < {limit}; ++{ix})", ix):
        xenv = {**env, x: ix}
        for a in k.axes():
            if a not in xenv and gen.root(a) == x:
                xenv[a] = ix
        for acc in accs:
            _step(gen, acc, x, xenv)
    for acc in accs:
        _bind(gen, acc)
    for v in k.outputs:
        gen.write(v, env, par)
    return gen.launch(total, "streamed", 16)


CHUNK = 16  # keys per chunk when the plan's stream tile is symbolic


def _chunk(gen: KernelGen, x: Axis, accs: list[_Acc]) -> int:
    """Chunk length for a lone normalised contraction (0: walk key by key)."""
    if len(accs) != 1 or accs[0].norm is None:
        return 0
    rule = STREAM_ACCUMULATORS[type(accs[0].norm.op)]
    if rule.block is None or gen.size(x) < 2:
        return 0
    tile = gen.kernel.tile(x)
    n = tile if isinstance(tile, int) else CHUNK
    return max(1, min(n, gen.size(x)))


def _chunked(gen: KernelGen, acc: _Acc, x: Axis, env: dict[Axis, str], limit: str,
             n: int) -> None:
    """Scores of ``n`` keys into ``sc[]``, the accumulator's block update, then
    ``acc[v] = acc[v] * rescale + sum_t sc[t] V[x0 + t, v]``."""
    assert acc.norm is not None
    w, a, node, norm = gen.w, acc.name, acc.node, acc.norm
    rule = STREAM_ACCUMULATORS[type(norm.op)]
    assert rule.block is not None
    last = gen.size(x) - 1
    other = next(v for v in node.inputs if v != norm.outputs[0])
    lim = gen.let(limit, "lim", "const int") if not limit.isdigit() else limit
    x0 = gen.unique(f"{x.name}0", "x")
    sc = gen.unique("sc")
    with w.block(f"for (int {x0} = 0; {x0} < {lim}; {x0} += {n})"):
        w.line(f"float {sc}[{n}];")
        ix = gen.unique(f"i_{x.name}", "i")
        with w.block(f"for (int {ix} = {x0}; {ix} < {x0} + {n}; ++{ix})", ix):
            e = {**env, **_alias_x(gen, x, f"min({ix}, {last})")}
            s = gen.load(norm.inputs[0], e)
            w.line(f"{sc}[{ix} - {x0}] = {ix} < {lim} ? {s} : {rule.pad};")
        rescale = rule.block(gen, norm, acc.state, sc, n)
        if rescale is not None:
            w.line(f"for (int j = 0; j < {acc.n}; ++j) {a}[j] *= {rescale};")
        t = gen.unique("t")
        with w.block(f"for (int {t} = 0; {t} < {n}; ++{t})", t):
            e = {**env, **_alias_x(gen, x, f"min({x0} + {t}, {last})")}
            p = gen.let(f"{sc}[{t}]", "p")

            def upd(ev: dict[Axis, str]) -> None:
                f = acc.flat(gen, ev)
                w.line(f"{a}[{f}] += {p} * {gen.load(other, ev)};")

            _over(gen, acc.free, e, upd)


def _alias_x(gen: KernelGen, x: Axis, expr: str) -> dict[Axis, str]:
    # axes renamed *from* the stream axis only: a rename into it (keys made from the query
    # axis) must not tie the query index to the key index
    return {a: expr for a in gen.kernel.axes() if a == x or gen.root(a) == x}


def _step(gen: KernelGen, acc: _Acc, x: Axis, xenv: dict[Axis, str]) -> None:
    node, w, a = acc.node, gen.w, acc.name
    if acc.norm is not None:
        rule = STREAM_ACCUMULATORS[type(acc.norm.op)]
        s = gen.load(acc.norm.inputs[0], xenv)
        rescale, p = rule.step(gen, acc.norm, acc.state, s)
        other = next(v for v in node.inputs if v != acc.norm.outputs[0])

        def upd(e: dict[Axis, str]) -> None:
            f = acc.flat(gen, e)
            old = f"{a}[{f}] * {rescale}" if rescale else f"{a}[{f}]"
            w.line(f"{a}[{f}] = {old} + {p} * {gen.load(other, e)};")

        _over(gen, acc.free, xenv, upd)
        return
    inner = [c for c in _contracted(node) if c != x and c not in xenv]
    fn = getattr(node.op, "fn", "sum")

    def add(e: dict[Axis, str]) -> None:
        f = acc.flat(gen, e)
        t = gen.load(node.inputs[0], e) if isinstance(node.op, L.Reduce) else _term(gen, node, x, e)
        if fn in ("max", "min"):
            w.line(f"{a}[{f}] = {gen.fn('f' + fn)}({a}[{f}], {t});")
        else:
            w.line(f"{a}[{f}] += {t};")

    _over(gen, acc.free, xenv, lambda e: _over(gen, inner, e, add))


def _bind(gen: KernelGen, acc: _Acc) -> None:
    node = acc.node
    scale = ""
    if acc.norm is not None:
        scale = gen.let(STREAM_ACCUMULATORS[type(acc.norm.op)].scale(gen, acc.norm, acc.state),
                        "scale")
    elif getattr(node.op, "fn", "") == "mean":
        scale = gen.lit(1.0 / math.prod(gen.size(c) for c in _contracted(node)))

    def expr(index: Mapping[Axis, str]) -> str:
        e = f"{acc.name}[{acc.flat(gen, index)}]"
        if scale:
            e = f"({e} * {scale})"
        if isinstance(node.op, L.Linear) and node.op.bias:
            e = f"({e} + {gen.param(node, 'bias', index)})"
        return e

    gen.bound[node.outputs[0]] = expr
