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
from ncd.codegen.rules import linear_weight
from ncd.graph import Node
from ncd.kernel import Kernel, Partition
from ncd.primitives import library as L

#: ``normalised_operands``, ``row_axis``, ``causal_bound``, ``alias_x`` and ``stream_choices``
#: are what another attention template (ncd-cuda's tensor-core one) reads the kernel with
__all__ = [
    "STREAM_ACCUMULATORS",
    "StreamAccumulator",
    "alias_x",
    "causal_bound",
    "normalised_operands",
    "row_axis",
    "stream_choices",
    "streamed_template",
]


@attrs.frozen
class StreamAccumulator:
    """How one normaliser streams: ``init`` declares state, ``step(s)`` returns (rescale of the
    old acc or None, weight of this term), ``scale`` the final factor applied to acc.
    ``block(sc, n)`` does a chunk at once: it turns the scores ``sc[0..n)`` into weights in
    place and returns the rescale of the old acc (or None); with ``vec`` the chunk is ``n``
    vectors of the dialect's width; ``pad`` fills scores past the end (a number, written as a
    literal of the kernel's format).
    """

    init: Callable[[KernelGen, Node], dict[str, str]]
    step: Callable[[KernelGen, Node, dict[str, str], str], tuple[str | None, str]]
    scale: Callable[[KernelGen, Node, dict[str, str]], str]
    block: Callable[[KernelGen, Node, dict[str, str], str, int, bool], str | None] | None = None
    pad: float = 0.0


def _softmax_init(gen: KernelGen, node: Node) -> dict[str, str]:
    # a finite start keeps exp(m - m_new) defined when the first scores are masked to -inf
    lowest = gen.dialect.lowest[gen.cdtype]
    return {"m": gen.var(lowest, "m"), "l": gen.var(gen.lit(0.0), "l")}


def _softmax_step(gen: KernelGen, node: Node, st: dict[str, str], s: str) -> tuple[str | None, str]:
    # fmax_any: a NaN score may be dropped from m, its weight exp(NaN - m) is NaN anyway
    mn = gen.let(f"{gen.fn('fmax_any')}({st['m']}, {s})", "mnew")
    c = gen.let(f"{gen.fn('exp')}({st['m']} - {mn})", "c")
    p = gen.let(f"{gen.fn('exp')}({s} - {mn})", "p")
    gen.w.line(f"{st['l']} = {st['l']} * {c} + {p};")
    gen.w.line(f"{st['m']} = {mn};")
    return c, p


def _softmax_block(
    gen: KernelGen, node: Node, st: dict[str, str], sc: str, n: int, vec: bool = False
) -> str:
    # one max and one rescale per chunk; the chunk's exponentials form one loop (on vectors,
    # exp(floatN) is a single vectorised call)
    w, fmax, exp = gen.w, gen.fn("fmax_any"), gen.fn("exp")
    t = gen.vtype if vec else gen.ctype
    mv = gen.var(f"{sc}[0]", "mv", t)
    w.line(f"for (int u = 1; u < {n}; ++u) {mv} = {fmax}({mv}, {sc}[u]);")
    mb = gen.let(f"{fmax}({st['m']}, {gen.across_lanes(mv, 'max', False) if vec else mv})", "mb")
    c = gen.let(f"{exp}({st['m']} - {mb})", "c")
    ps = gen.var(f"({t})({gen.lit(0.0)})" if vec else gen.lit(0.0), "ps", t)
    w.line(f"for (int u = 0; u < {n}; ++u) {{ {sc}[u] = {exp}({sc}[u] - {mb}); {ps} += {sc}[u]; }}")
    w.line(f"{st['l']} = {st['l']} * {c} + {gen.across_lanes(ps, 'sum') if vec else ps};")
    w.line(f"{st['m']} = {mb};")
    return c


def _l2_block(
    gen: KernelGen, node: Node, st: dict[str, str], sc: str, n: int, vec: bool = False
) -> None:
    t = gen.vtype if vec else gen.ctype
    qv = gen.var(f"({t})({gen.lit(0.0)})" if vec else gen.lit(0.0), "qv", t)
    gen.w.line(f"for (int u = 0; u < {n}; ++u) {qv} += {sc}[u] * {sc}[u];")
    gen.w.line(f"{st['ss']} += {gen.across_lanes(qv, 'sum') if vec else qv};")
    return None


def _l2_init(gen: KernelGen, node: Node) -> dict[str, str]:
    return {"ss": gen.var(gen.lit(0.0), "ss")}


def _l2_step(gen: KernelGen, node: Node, st: dict[str, str], s: str) -> tuple[str | None, str]:
    gen.w.line(f"{st['ss']} += {s} * {s};")
    return None, s


STREAM_ACCUMULATORS: dict[type, StreamAccumulator] = {
    # pad -inf: a padded score weighs exp(-inf - m) = 0 (m stays finite, see _softmax_init),
    # also in a row whose every real score is -inf (a finite pad would weigh exp(0) = 1 there)
    L.Softmax: StreamAccumulator(
        _softmax_init,
        _softmax_step,
        lambda g, n, st: f"({g.lit(1.0)} / {st['l']})",
        _softmax_block,
        -math.inf,
    ),
    L.L2Norm: StreamAccumulator(
        _l2_init,
        _l2_step,
        lambda g, n, st: f"{g.fn('rsqrt')}({st['ss']} + {g.lit(n.op.eps)})",  # type: ignore[attr-defined]
        _l2_block,
        0.0,
    ),
}


COMPLETING = frozenset({"sum", "mean", "max", "min", "online_softmax", "l2"})
MAX_ACC_ELEMS = 4096  # a work-item's accumulators live in private memory (the stack on a CPU)


def causal_bound(gen: KernelGen, n: Node, x: Axis, env: dict[Axis, str]) -> str | None:
    """A causal mask whose fill is neutral for this normaliser (-inf for softmax, 0 for L2)
    zeroes every key after ``q + offset``: stop the stream there."""
    neutral = "-inf" if isinstance(n.op, L.Softmax) else "0"
    for i in gen.kernel.nodes:
        op = gen.graph.nodes[i].op
        if isinstance(op, L.CausalMask) and op.x == x and op.q in env and op.fill == neutral:
            return f"{env[op.q]} + {gen.size(op.x) - gen.size(op.q) + 1}"
    return None


class _Acc:
    """One completing node's accumulator array over the output axes a work-item does not fix.
    With ``vec`` (an axis of unit stride, a multiple of the vector width) it is an array of
    vectors along that axis."""

    def __init__(
        self, gen: KernelGen, node: Node, env: dict[Axis, str], vec: Axis | None = None
    ) -> None:
        self.node = node
        out = node.outputs[0]
        self.free = [a for a in gen.graph.values[out].axes if a not in env]
        self.vec = vec
        self.n = math.prod(gen.size(a) for a in self.free)
        self.name = gen.unique("acc")
        self.state: dict[str, str] = {}
        self.norm: Node | None = None

    def fits(self) -> bool:
        """The accumulator array has a length known when compiling (private arrays are sized
        at compile time) and fits private memory; else the template declines the kernel."""
        return isinstance(self.n, int) and self.n <= MAX_ACC_ELEMS

    def flat(self, gen: KernelGen, index: Mapping[Axis, str]) -> str:
        expr = ""
        for a in self.free:
            expr = index[a] if not expr else f"({expr}) * {gen.size(a)} + {index[a]}"
        if self.vec is not None:  # inside the vector loop the flat index is a lane multiple
            return f"({expr}) / {gen.dialect.vector_width}"
        return expr or "0"

    def declare(self, gen: KernelGen, init: str) -> None:
        ctype, n = gen.ctype, self.n
        if self.vec is not None:
            ctype, n, init = gen.vtype, n // gen.dialect.vector_width, f"({gen.vtype})({init})"
        gen.w.line(f"{ctype} {self.name}[{n}];")
        gen.w.line(f"for (int j = 0; j < {n}; ++j) {self.name}[j] = {init};")

    def rescale(self, gen: KernelGen, factor: str) -> None:
        n = self.n // gen.dialect.vector_width if self.vec is not None else self.n
        gen.w.line(f"for (int j = 0; j < {n}; ++j) {self.name}[j] *= {factor};")


def _over(
    gen: KernelGen, axes: list[Axis], env: dict[Axis, str], body: Callable[[dict[Axis, str]], Any]
) -> None:
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
        return f"{gen.load(node.inputs[0], e)} * {linear_weight(gen, node, e, e)}"
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
    done = [
        i
        for i in k.nodes
        if kinds.get(i) in COMPLETING and isinstance(g.nodes[i].op, L.Einsum | L.Linear | L.Reduce)
    ]
    if not done:
        return None
    par = [a for a in gen.grid() if a != x]
    if len(done) == 1 and kinds[done[0]] in ("online_softmax", "l2"):
        lone = normalised_operands(gen, g.nodes[done[0]])
        if lone is not None and _chunk(gen, x, lone[0]):
            return _rows_template(gen, x, par, g.nodes[done[0]], *lone)
    env, total = gen.open_grid(par)
    accs = []
    for i in done:
        node = g.nodes[i]
        acc = _Acc(gen, node, env)
        if not acc.fits():
            return None
        if kinds[i] in ("online_softmax", "l2"):
            parts = normalised_operands(gen, node)
            if parts is None:
                return None  # homogeneous maps between normaliser and contraction: pointwise
            acc.norm = parts[0]
            acc.state = STREAM_ACCUMULATORS[type(acc.norm.op)].init(gen, acc.norm)
        init = {"max": gen.lit(-math.inf), "min": gen.lit(math.inf)}.get(
            getattr(node.op, "fn", ""), gen.lit(0.0)
        )
        acc.declare(gen, init)
        accs.append(acc)
    limit = str(gen.size(x))
    if len(accs) == 1 and accs[0].norm is not None:
        bound = causal_bound(gen, accs[0].norm, x, env)
        limit = limit if bound is None else f"min({gen.index_lit(gen.size(x))}, {bound})"
    ix = gen.unique(f"i_{x.name}", "i")
    with gen.w.block(f"for ({gen.itype} {ix} = 0; {ix} < {limit}; ++{ix})", ix):
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


CHUNK = 32  # keys per chunk when the plan's stream tile is symbolic
ROWS = 4  # query rows per work-item in the chunked template: each key and value load serves all
ROWS_GROUP = 8  # work-items per work-group there (unless the plan chooses the rows of a group)


def stream_choices(k: Kernel, chunk: int, rows: int, group: int | None = None) -> list[Partition]:
    """The tiles ``_rows_template`` renders a lone normalised contraction (attention) with, as
    choices a target records in its plan: ``chunk`` keys per step (``stream`` at level 0, the
    plan's own int tile first), ``rows`` query rows per work-item (the row axis's ``group`` at
    level 1) and, when given, ``group`` query rows per work-group (level 0; the work-group then
    holds ``group // rows`` work-items). ``[]`` for a kernel the template does not render."""
    g, s = k.graph, k.schedule
    if any(g.size(a) is None for a in k.axes()) or not k.streamed:
        return []
    x = k.streamed[0]
    kinds = s.accumulators
    done = [
        i
        for i in k.nodes
        if kinds.get(i) in COMPLETING and isinstance(g.nodes[i].op, L.Einsum | L.Linear | L.Reduce)
    ]
    if len(done) != 1 or kinds[done[0]] not in ("online_softmax", "l2"):
        return []
    node = g.nodes[done[0]]
    made = {v: i for i in k.nodes for v in g.nodes[i].outputs}
    norms = [
        v for v in node.inputs if v in made and type(g.nodes[made[v]].op) in STREAM_ACCUMULATORS
    ]
    size = {a: int(g.size(a) or 1) for a in k.axes()}
    if len(norms) != 1 or len(node.inputs) != 2 or size[x] < 2:
        return []
    other = next(v for v in node.inputs if v != norms[0])
    tile = k.tile(x)
    n = tile if isinstance(tile, int) else chunk
    out = [Partition(x, "stream", max(1, min(n, size[x])), 0)]
    serial = {x}
    for i in k.nodes:
        if g.nodes[i].op.category == "normaliser":
            serial.update(a for grp in g.nodes[i].op.signature()[0] for a in grp)
    par = [a for a in dict.fromkeys(s.root(a) for a in k.grouped if a not in serial) if a != x]
    free = [a for a in g.values[node.outputs[0]].axes if s.root(a) not in par]
    if math.prod(size[a] for a in free) > MAX_ACC_ELEMS:
        return []
    theirs = g.values[other].axes
    for a in reversed(par):
        if size[a] > 1 and not any(b == a or s.root(b) == a for b in theirs):
            per_item = min(rows, size[a])
            out.append(Partition(a, "group", per_item, 1))
            if group is not None:
                out.append(Partition(a, "group", max(per_item, group), 0))
            break
    return out


def normalised_operands(gen: KernelGen, node: Node) -> tuple[Node, int] | None:
    """(normaliser, other operand) when ``node`` contracts ``norm_x(s) * other`` directly."""
    g = gen.graph
    norms = [
        v
        for v in node.inputs
        if v in gen.made_here and type(g.nodes[gen.made_here[v]].op) in STREAM_ACCUMULATORS
    ]
    if len(norms) != 1 or len(node.inputs) != 2:
        return None
    return g.nodes[gen.made_here[norms[0]]], next(v for v in node.inputs if v != norms[0])


def _chunk(gen: KernelGen, x: Axis, norm: Node) -> int:
    """Chunk length for a lone normalised contraction (0: walk key by key)."""
    rule = STREAM_ACCUMULATORS[type(norm.op)]
    known = gen.known(x)  # a run-time length: whole chunks, the tail masked (``lim``)
    if rule.block is None or (known is not None and known < 2):
        return 0
    tile = gen.kernel.tile(x)
    n = tile if isinstance(tile, int) else CHUNK
    return max(1, n if known is None else min(n, known))


def row_axis(gen: KernelGen, par: list[Axis], other: int) -> Axis | None:
    """A grid axis the contraction's other operand does not vary along (the query axis): a
    work-item takes several of its indices so each load of ``other`` serves them all."""
    theirs = gen.graph.values[other].axes
    for a in reversed(par):
        known = gen.known(a)  # a run-time length may be 1: rows past the end are clamped
        if (known is None or known > 1) and not any(b == a or gen.root(b) == a for b in theirs):
            return a
    return None


def _vector_axis(gen: KernelGen, node: Node, other: int, env: dict[Axis, str]) -> Axis | None:
    """The accumulator's one free axis, when every array holding it stores it with unit stride
    and whatever follows the contraction in the kernel has vector rules."""
    from ncd.codegen.vector import has_vector_rule

    width = gen.dialect.vector_width
    free = [a for a in gen.graph.values[node.outputs[0]].axes if a not in env]
    if not width or len(free) != 1 or gen.cdtype != "float32":
        return None
    known = gen.known(free[0])
    if known is None or known % width:
        return None
    (v,) = free
    g, k = gen.graph, gen.kernel
    if other in gen.made_here:
        return None
    for val in (*k.inputs, *k.outputs):
        order = gen.layouts.get(val, g.values[val].axes)
        if v in order and (order[-1] != v or not gen.dialect.vectorises(g.values[val].dtype)):
            return None  # a format without vector loads and stores in this dialect
    for i in k.nodes:
        if not all(gen.dialect.vectorises(p.dtype) for p in g.nodes[i].op.params()):
            return None
    for i in k.nodes:
        n = g.nodes[i]
        if (
            n is not node
            and any(v in g.values[o].axes for o in n.outputs)
            and not has_vector_rule(n.op)
        ):
            return None
    return v


def _rows_template(
    gen: KernelGen, x: Axis, par: list[Axis], node: Node, norm: Node, other: int
) -> KernelSource | None:
    """A lone normalised contraction in chunks of keys, ``ROWS`` query rows per work-item:
    per chunk the scores of every row into ``sc[]``, the normaliser's block update, then
    ``acc[v] = acc[v] * rescale + sum_t sc[t] * other[x0 + t, v]`` with each ``other`` load
    shared by the rows. Rows past the end repeat the last one (same values, same addresses)."""
    w, rule = gen.w, STREAM_ACCUMULATORS[type(norm.op)]
    n = _chunk(gen, x, norm)
    row = row_axis(gen, par, other)
    chosen = gen.kernel.chosen(row, 1) if row is not None else None  # the plan's rows
    known = gen.known(row) if row is not None else 1  # a run-time length: rows are clamped
    want = chosen or ROWS
    rows = 1 if row is None else want if known is None else min(want, known)
    env, total = gen.open_grid(par, {row: rows} if row is not None and rows > 1 else None)
    envs = [env]
    if row is not None and rows > 1:
        envs = []
        for r in range(rows):
            i = gen.unique(f"i_{row.name}_{r}", "i")
            last_row = gen.index_lit(gen.size(row) - 1)
            w.line(f"const {gen.itype} {i} = min({env[row]} + {r}, {last_row});")
            envs.append({a: i if a == row or gen.root(a) == row else e for a, e in env.items()})
    width = gen.dialect.vector_width
    vec = _vector_axis(gen, node, other, env)
    # vector score chunks in float32 only: exp of a double8 is a call whose AVX ABI PoCL warns on
    vectors = bool(width) and n % width == 0 and gen.cdtype == "float32"
    accs = []
    for e in envs:
        acc = _Acc(gen, node, e, vec)
        if not acc.fits():
            return None
        acc.norm = norm
        acc.state = rule.init(gen, norm)
        acc.declare(gen, gen.lit(0.0))
        accs.append(acc)
    limit = str(gen.size(x))
    bound = causal_bound(gen, norm, x, envs[-1])  # the last row sees the most keys
    if bound is not None:
        limit = f"min({gen.index_lit(gen.size(x))}, {bound})"
    last = gen.index_lit(gen.size(x) - 1)
    lim = gen.let(limit, "lim", f"const {gen.itype}") if not limit.isdigit() else limit
    x0 = gen.unique(f"i0_{x.name}", "i")  # the chunk's first key (class tag: an axis name)
    with w.block(f"for ({gen.itype} {x0} = 0; {x0} < {lim}; {x0} += {n})"):
        scs = []
        for _ in accs:
            sc = gen.unique("sc")
            if vectors:
                w.line(f"{gen.vtype} {sc}v[{n // width}];")
                w.line(f"{gen.ctype}* {sc} = ({gen.ctype}*){sc}v;")
            else:
                w.line(f"{gen.ctype} {sc}[{n}];")
            scs.append(sc)
        ix = gen.unique(f"i_{x.name}", "i")
        with w.block(f"for ({gen.itype} {ix} = {x0}; {ix} < {x0} + {n}; ++{ix})", ix):
            for e, sc in zip(envs, scs, strict=True):
                s = gen.load(norm.inputs[0], {**e, **alias_x(gen, x, f"min({ix}, {last})")})
                w.line(f"{sc}[{ix} - {x0}] = {ix} < {lim} ? {s} : {gen.lit(rule.pad)};")
        for acc, sc in zip(accs, scs, strict=True):
            assert rule.block is not None
            rescale = (
                rule.block(gen, norm, acc.state, f"{sc}v", n // width, True)
                if vectors
                else rule.block(gen, norm, acc.state, sc, n, False)
            )
            if rescale is not None:
                acc.rescale(gen, rescale)
        t = gen.unique("t")
        gen.vec = vec  # from here on loops over the accumulator's axis step by vectors (the
        # scores above may contract that very axis, as attention's q.k and p.v share d_head)
        with w.block(f"for ({gen.itype} {t} = 0; {t} < {n}; ++{t})", t):
            ps = [gen.let(f"{sc}[{t}]", "p") for sc in scs]
            e = {**env, **alias_x(gen, x, f"min({x0} + {t}, {last})")}

            def upd(ev: dict[Axis, str]) -> None:
                val = gen.let(gen.load(other, ev), "val")
                for acc, p in zip(accs, ps, strict=True):
                    f = acc.flat(gen, ev)
                    w.line(f"{acc.name}[{f}] += {p} * {val};")

            _over(gen, accs[0].free, e, upd)
    for acc, e in zip(accs, envs, strict=True):
        _bind(gen, acc)
        for v in gen.kernel.outputs:
            gen.write(v, e, par)
    per_group = gen.kernel.chosen(row, 0) if row is not None else None
    local = max(1, per_group // rows) if per_group else ROWS_GROUP if rows > 1 else 16
    return gen.launch(total, "streamed", local)


def alias_x(gen: KernelGen, x: Axis, expr: str) -> dict[Axis, str]:
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
        scale = gen.let(
            STREAM_ACCUMULATORS[type(acc.norm.op)].scale(gen, acc.norm, acc.state), "scale"
        )
    elif getattr(node.op, "fn", "") == "mean":
        scale = gen.recip(math.prod(gen.size(c) for c in _contracted(node)))

    def expr(index: Mapping[Axis, str]) -> str:
        e = f"{acc.name}[{acc.flat(gen, index)}]"
        if scale:
            e = f"({e} * {scale})"
        if isinstance(node.op, L.Linear) and node.op.bias:
            e = f"({e} + {gen.param(node, 'bias', index)})"
        return e

    gen.bound[node.outputs[0]] = expr
