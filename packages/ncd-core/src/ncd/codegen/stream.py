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

import functools
import math
import operator
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from typing import Any

import attrs

from ncd.axis import Axis
from ncd.codegen import ir
from ncd.codegen.ir import Expr
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
    """How one normaliser streams: ``init`` declares its state variables, ``step(s)`` returns
    (rescale of the old acc or None, weight of this term), ``scale`` the final factor applied
    to acc. ``block(sc, n)`` does a chunk at once: it turns the scores in the private array
    ``sc[0..n)`` into weights in place and returns the rescale of the old acc (or None); with
    ``vec`` the chunk is ``n`` vectors of the dialect's width; ``pad`` fills scores past the
    end (a number, written as a literal of the kernel's format). All of them build IR.
    """

    init: Callable[[KernelGen, Node], dict[str, ir.Var]]
    step: Callable[[KernelGen, Node, dict[str, ir.Var], Expr], tuple[Expr | None, Expr]]
    scale: Callable[[KernelGen, Node, dict[str, ir.Var]], Expr]
    block: Callable[[KernelGen, Node, dict[str, ir.Var], str, int, bool], Expr | None] | None = None
    pad: float = 0.0


@contextmanager
def _count(gen: KernelGen, name: str, stop: int, start: int = 0) -> Iterator[ir.Var]:
    """A loop of an ``int`` counter over ``start .. stop - 1`` (a chunk, an accumulator array)."""
    u = ir.Var(name, "int32")
    with gen.w.block(ir.For(u, ir.Const(start, "int32"), ir.Const(stop, "int32")), name):
        yield u


def _zero(gen: KernelGen, typ: str) -> Expr:
    """Zero of the arithmetic type ``typ`` (every lane of a vector)."""
    return ir.Broadcast(gen.lit(0.0), typ) if ir.lanes_of(typ)[1] > 1 else gen.lit(0.0)


def _softmax_init(gen: KernelGen, node: Node) -> dict[str, ir.Var]:
    # a finite start keeps exp(m - m_new) defined when the first scores are masked to -inf
    lowest = ir.Raw(gen.dialect.lowest[gen.cdtype], gen.cdtype)
    return {"m": gen.var(lowest, "m"), "l": gen.var(gen.lit(0.0), "l")}


def _softmax_step(
    gen: KernelGen, node: Node, st: dict[str, ir.Var], s: Expr
) -> tuple[Expr | None, Expr]:
    # fmax_any: a NaN score may be dropped from m, its weight exp(NaN - m) is NaN anyway
    m, l = st["m"], st["l"]  # noqa: E741  (the paper's name)
    mn = gen.let(gen.call("fmax_any", m, s), "mnew")
    c = gen.let(gen.call("exp", m - mn), "c")
    p = gen.let(gen.call("exp", s - mn), "p")
    gen.w.line(ir.Assign(l, l * c + p))
    gen.w.line(ir.Assign(m, mn))
    return c, p


def _softmax_block(
    gen: KernelGen, node: Node, st: dict[str, ir.Var], sc: str, n: int, vec: bool = False
) -> Expr:
    # one max and one rescale per chunk; the chunk's exponentials form one loop (on vectors,
    # exp(floatN) is a single vectorised call)
    typ = gen.vt if vec else gen.cdtype
    m, l = st["m"], st["l"]  # noqa: E741
    mv = gen.var(ir.Elem(sc, ir.Const(0, "int32"), typ), "mv", typ)
    with _count(gen, "u", n, 1) as u:
        gen.w.line(ir.Assign(mv, gen.call("fmax_any", mv, ir.Elem(sc, u, typ))))
    top = gen.across_lanes(mv, "max", False) if vec else mv
    mb = gen.let(gen.call("fmax_any", m, top), "mb")
    c = gen.let(gen.call("exp", m - mb), "c")
    ps = gen.var(_zero(gen, typ), "ps", typ)
    with _count(gen, "u", n) as u:
        score = ir.Elem(sc, u, typ)
        gen.w.line(ir.Assign(score, gen.call("exp", score - mb)))
        gen.w.line(ir.Assign(ps, score, "+="))
    gen.w.line(ir.Assign(l, l * c + (gen.across_lanes(ps, "sum") if vec else ps)))
    gen.w.line(ir.Assign(m, mb))
    return c


def _l2_block(
    gen: KernelGen, node: Node, st: dict[str, ir.Var], sc: str, n: int, vec: bool = False
) -> None:
    typ = gen.vt if vec else gen.cdtype
    qv = gen.var(_zero(gen, typ), "qv", typ)
    with _count(gen, "u", n) as u:
        gen.w.line(ir.Assign(qv, ir.Elem(sc, u, typ) * ir.Elem(sc, u, typ), "+="))
    gen.w.line(ir.Assign(st["ss"], gen.across_lanes(qv, "sum") if vec else qv, "+="))
    return None


def _l2_init(gen: KernelGen, node: Node) -> dict[str, ir.Var]:
    return {"ss": gen.var(gen.lit(0.0), "ss")}


def _l2_step(
    gen: KernelGen, node: Node, st: dict[str, ir.Var], s: Expr
) -> tuple[Expr | None, Expr]:
    gen.w.line(ir.Assign(st["ss"], s * s, "+="))
    return None, s


STREAM_ACCUMULATORS: dict[type, StreamAccumulator] = {
    # pad -inf: a padded score weighs exp(-inf - m) = 0 (m stays finite, see _softmax_init),
    # also in a row whose every real score is -inf (a finite pad would weigh exp(0) = 1 there)
    L.Softmax: StreamAccumulator(
        _softmax_init,
        _softmax_step,
        lambda g, n, st: g.lit(1.0) / st["l"],
        _softmax_block,
        -math.inf,
    ),
    L.L2Norm: StreamAccumulator(
        _l2_init,
        _l2_step,
        lambda g, n, st: g.call("rsqrt", st["ss"] + g.lit(n.op.eps)),  # type: ignore[attr-defined]
        _l2_block,
        0.0,
    ),
}


COMPLETING = frozenset({"sum", "mean", "max", "min", "prod", "logsumexp", "online_softmax", "l2"})
MAX_ACC_ELEMS = 4096  # a work-item's accumulators live in private memory (the stack on a CPU)


def row_statistics(g: Any, done: list[int], kinds: Mapping[int, str]) -> list[Node] | None:
    """The completing nodes besides one normalised contraction in ``done`` when each is a row
    statistic of its normaliser that the normaliser's own state holds (a backward keeps it):
    ``logsumexp`` of softmax's scores (``m + log l``), the sum of squares of L2's (``ss``).
    ``None`` when ``done`` is anything else."""
    main = [i for i in done if kinds.get(i) in ("online_softmax", "l2")]
    if len(main) != 1:
        return None
    node = g.nodes[main[0]]
    made = {v: g.producers[v] for v in node.inputs if v in g.producers}
    norms = [g.nodes[made[v]] for v in made if type(g.nodes[made[v]].op) in STREAM_ACCUMULATORS]
    if len(norms) != 1:
        return None
    (norm,) = norms
    s, x = norm.inputs[0], norm.op.axes()[0]
    stats = []
    for i in done:
        if i == main[0]:
            continue
        op = g.nodes[i].op
        if not isinstance(op, L.Reduce) or tuple(op.axes_) != (x,):
            return None
        (v,) = g.nodes[i].inputs
        if isinstance(norm.op, L.Softmax) and op.fn == "logsumexp" and v == s:
            stats.append(g.nodes[i])
            continue
        p = g.producers.get(v)
        square = g.nodes[p] if p is not None else None
        if not (
            isinstance(norm.op, L.L2Norm)
            and op.fn == "sum"
            and square is not None
            and isinstance(square.op, L.Unary)
            and square.op.fn == "square"
            and square.inputs[0] == s
        ):
            return None
        stats.append(g.nodes[i])
    return stats


def _bind_statistics(gen: KernelGen, acc: _Acc, stats: list[Node]) -> None:
    """Bind each row statistic to the normaliser's state of ``acc`` (its row)."""
    for node in stats:
        if "m" in acc.state:  # softmax's running maximum and sum
            m, total = acc.state["m"], acc.state["l"]
            finite = m.cmp("<", gen.lit(math.inf))
            value: Expr = ir.Select(finite, m + gen.call("log", total), m)
        else:
            value = acc.state["ss"]
        gen.bound[node.outputs[0]] = lambda index, value=value: value


def causal_bound(gen: KernelGen, n: Node, x: Axis, env: Mapping[Axis, Expr | str]) -> Expr | None:
    """A causal mask whose fill is neutral for this normaliser (-inf for softmax, 0 for L2)
    zeroes every key after ``q + offset``: stop the stream there."""
    neutral = "-inf" if isinstance(n.op, L.Softmax) else "0"
    for i in gen.kernel.nodes:
        op = gen.graph.nodes[i].op
        if isinstance(op, L.CausalMask) and op.x == x and op.q in env and op.fill == neutral:
            return gen.ix(env[op.q]) + gen.ix(gen.size(op.x) - gen.size(op.q) + 1)
    return None


def _stop(gen: KernelGen, x: Axis, bound: Expr | None) -> Expr:
    """Where a walk along ``x`` stops: its size, or before it at a causal ``bound``."""
    if bound is None:
        return gen.ix(gen.size(x))
    return ir.Call("min", (gen.index_const(gen.size(x)), bound), gen.ityp)


class _Acc:
    """One completing node's accumulator array over the output axes a work-item does not fix.
    With ``vec`` (an axis of unit stride, a multiple of the vector width) it is an array of
    vectors along that axis."""

    def __init__(
        self, gen: KernelGen, node: Node, env: Mapping[Axis, Expr], vec: Axis | None = None
    ) -> None:
        self.node = node
        out = node.outputs[0]
        self.free = [a for a in gen.graph.values[out].axes if a not in env]
        self.vec = vec
        self.n = math.prod(gen.size(a) for a in self.free)
        self.name = gen.unique("acc")
        self.type = gen.cdtype if vec is None else gen.vt
        self.state: dict[str, ir.Var] = {}
        self.norm: Node | None = None
        # a logsumexp carries its running maximum in ``name`` and its sum in ``aux``
        self.aux = gen.unique("accl") if getattr(node.op, "fn", "") == "logsumexp" else None

    def fits(self) -> bool:
        """The accumulator array has a length known when compiling (private arrays are sized
        at compile time) and fits private memory; else the template declines the kernel."""
        return isinstance(self.n, int) and self.n <= MAX_ACC_ELEMS

    def length(self, gen: KernelGen) -> int:
        assert isinstance(self.n, int)
        return self.n if self.vec is None else self.n // gen.dialect.vector_width

    def at(self, gen: KernelGen, index: Mapping[Axis, Expr | str]) -> ir.Elem:
        """The element of the accumulator for ``index`` (row-major over ``free``)."""
        flat: Expr | None = None
        for a in self.free:
            i = gen.ix(index[a])
            flat = i if flat is None else flat * gen.ix(gen.size(a)) + i
        if flat is None:
            flat = gen.ix(0)
        elif self.vec is not None:  # inside the vector loop the flat index is a lane multiple
            flat = flat / gen.dialect.vector_width
        return ir.Elem(self.name, flat, self.type)

    def sum_at(self, gen: KernelGen, index: Mapping[Axis, Expr | str]) -> ir.Elem:
        """A logsumexp's running sum beside its maximum ``at(index)``."""
        assert self.aux is not None
        return ir.Elem(self.aux, self.at(gen, index).index, self.type)

    def declare(self, gen: KernelGen, init: Expr) -> None:
        if self.vec is not None:
            init = ir.Broadcast(init, self.type)
        n = self.length(gen)
        gen.w.line(ir.Array(self.name, self.type, n))
        if self.aux is not None:
            gen.w.line(ir.Array(self.aux, self.type, n))
        with _count(gen, "j", n) as j:
            gen.w.line(ir.Assign(ir.Elem(self.name, j, self.type), init))
            if self.aux is not None:
                gen.w.line(ir.Assign(ir.Elem(self.aux, j, self.type), gen.lit(0.0)))

    def rescale(self, gen: KernelGen, factor: Expr) -> None:
        with _count(gen, "j", self.length(gen)) as j:
            gen.w.line(ir.Assign(ir.Elem(self.name, j, self.type), factor, "*="))


def _over(
    gen: KernelGen,
    axes: list[Axis],
    env: Mapping[Axis, Expr],
    body: Callable[[dict[Axis, Expr]], Any],
) -> None:
    def go(e: dict[Axis, Expr], rest: list[Axis]) -> None:
        if not rest:
            body(e)
            return
        with gen.loop(rest[0]) as i:
            go({**e, rest[0]: i}, rest[1:])

    go(dict(env), axes)


def _term(gen: KernelGen, node: Node, x: Axis, e: Mapping[Axis, Expr]) -> Expr:
    """The product a contraction adds at one index of every contracted axis."""
    op = node.op
    if isinstance(op, L.Linear):
        return gen.load(node.inputs[0], e) * linear_weight(gen, node, e, e)
    factors = [gen.load(v, e) for v in node.inputs]
    return functools.reduce(operator.mul, factors[1:], factors[0])


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
    stats = row_statistics(g, done, kinds)
    if stats is not None:
        (main,) = (i for i in done if kinds[i] in ("online_softmax", "l2"))
        lone = normalised_operands(gen, g.nodes[main])
        if lone is not None and _chunk(gen, x, lone[0]):
            return _rows_template(gen, x, par, g.nodes[main], *lone, stats)
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
        # a logsumexp's maximum starts finite, as softmax's: exp(m - m_new) stays defined
        lowest = ir.Raw(gen.dialect.lowest[gen.cdtype], gen.cdtype)
        init = {
            "max": gen.lit(-math.inf),
            "min": gen.lit(math.inf),
            "prod": gen.lit(1.0),
            "logsumexp": lowest,
        }.get(getattr(node.op, "fn", ""), gen.lit(0.0))
        acc.declare(gen, init)
        accs.append(acc)
    bound = None
    if len(accs) == 1 and accs[0].norm is not None:
        bound = causal_bound(gen, accs[0].norm, x, env)
    ix = ir.Var(gen.unique(f"i_{x.name}", "i"), gen.ityp)
    with gen.w.block(ir.For(ix, gen.ix(0), _stop(gen, x, bound)), ix.name):
        xenv: dict[Axis, Expr] = {**env, x: ix}
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
    if row_statistics(g, done, kinds) is None:
        return []
    (main,) = (i for i in done if kinds[i] in ("online_softmax", "l2"))
    node = g.nodes[main]
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


def _vector_axis(gen: KernelGen, node: Node, other: int, env: Mapping[Axis, Expr]) -> Axis | None:
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
    gen: KernelGen,
    x: Axis,
    par: list[Axis],
    node: Node,
    norm: Node,
    other: int,
    stats: list[Node] | None = None,
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
    envs: list[dict[Axis, Expr]] = [env]
    if row is not None and rows > 1:
        envs = []
        last_row = gen.index_const(gen.size(row) - 1)
        for r in range(rows):
            i = ir.Var(gen.unique(f"i_{row.name}_{r}", "i"), gen.ityp)
            w.line(ir.Decl(i, ir.Call("min", (env[row] + r, last_row), gen.ityp), const=True))
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
    bound = causal_bound(gen, norm, x, envs[-1])  # the last row sees the most keys
    stop = _stop(gen, x, bound)
    lim = stop if isinstance(stop, ir.Const) else gen.let(stop, "lim", gen.ityp, const=True)
    last = gen.index_const(gen.size(x) - 1)
    x0 = ir.Var(gen.unique(f"i0_{x.name}", "i"), gen.ityp)  # the chunk's first key
    with w.block(ir.For(x0, gen.ix(0), lim, n), x0.name):
        scs = []
        for _ in accs:
            sc = gen.unique("sc")
            if vectors:
                w.line(ir.Array(f"{sc}v", gen.vt, n // width))
                whole = ir.Var(f"{sc}v", f"{gen.vt}*")
                w.line(ir.Decl(ir.Var(sc, f"{gen.cdtype}*"), ir.Convert(whole, f"{gen.cdtype}*")))
            else:
                w.line(ir.Array(sc, gen.cdtype, n))
            scs.append(sc)
        ix = ir.Var(gen.unique(f"i_{x.name}", "i"), gen.ityp)
        with w.block(ir.For(ix, x0, x0 + n), ix.name):
            key = ir.Call("min", (ix, last), gen.ityp)
            for e, sc in zip(envs, scs, strict=True):
                s = gen.load(norm.inputs[0], {**e, **alias_x(gen, x, key)})
                score = ir.Select(ix.cmp("<", lim), s, gen.lit(rule.pad))
                w.line(ir.Assign(ir.Elem(sc, ix - x0, gen.cdtype), score))
        for acc, sc in zip(accs, scs, strict=True):
            assert rule.block is not None
            rescale = (
                rule.block(gen, norm, acc.state, f"{sc}v", n // width, True)
                if vectors
                else rule.block(gen, norm, acc.state, sc, n, False)
            )
            if rescale is not None:
                acc.rescale(gen, rescale)
        t = ir.Var(gen.unique("t"), gen.ityp)
        gen.vec = vec  # from here on loops over the accumulator's axis step by vectors (the
        # scores above may contract that very axis, as attention's q.k and p.v share d_head)
        with w.block(ir.For(t, gen.ix(0), gen.ix(n)), t.name):
            ps = [gen.let(ir.Elem(sc, t, gen.cdtype), "p") for sc in scs]
            e = {**env, **alias_x(gen, x, ir.Call("min", (x0 + t, last), gen.ityp))}

            def upd(ev: dict[Axis, Expr]) -> None:
                val = gen.let(gen.load(other, ev), "val")
                for acc, p in zip(accs, ps, strict=True):
                    w.line(ir.Assign(acc.at(gen, ev), p * val, "+="))

            _over(gen, accs[0].free, e, upd)
    for acc, e in zip(accs, envs, strict=True):
        _bind(gen, acc)
        _bind_statistics(gen, acc, stats or [])
        for v in gen.kernel.outputs:
            gen.write(v, e, par)
    per_group = gen.kernel.chosen(row, 0) if row is not None else None
    local = max(1, per_group // rows) if per_group else ROWS_GROUP if rows > 1 else 16
    return gen.launch(total, "streamed", local)


def alias_x(gen: KernelGen, x: Axis, expr: Expr | str) -> dict[Axis, Any]:
    # axes renamed *from* the stream axis only: a rename into it (keys made from the query
    # axis) must not tie the query index to the key index
    return {a: expr for a in gen.kernel.axes() if a == x or gen.root(a) == x}


def _step(gen: KernelGen, acc: _Acc, x: Axis, xenv: dict[Axis, Expr]) -> None:
    node, w = acc.node, gen.w
    if acc.norm is not None:
        rule = STREAM_ACCUMULATORS[type(acc.norm.op)]
        s = gen.load(acc.norm.inputs[0], xenv)
        rescale, p = rule.step(gen, acc.norm, acc.state, s)
        other = next(v for v in node.inputs if v != acc.norm.outputs[0])

        def upd(e: dict[Axis, Expr]) -> None:
            el = acc.at(gen, e)
            old = el if rescale is None else el * rescale
            w.line(ir.Assign(el, old + p * gen.load(other, e)))

        _over(gen, acc.free, xenv, upd)
        return
    inner = [c for c in _contracted(node) if c != x and c not in xenv]
    fn = getattr(node.op, "fn", "sum")

    def add(e: dict[Axis, Expr]) -> None:
        el = acc.at(gen, e)
        t = gen.load(node.inputs[0], e) if isinstance(node.op, L.Reduce) else _term(gen, node, x, e)
        if fn == "logsumexp":  # the running maximum rescales the running sum (online softmax)
            total, t = acc.sum_at(gen, e), gen.let(t, "s")
            mn = gen.let(gen.call("fmax_any", el, t), "mnew")
            w.line(ir.Assign(total, total * gen.call("exp", el - mn) + gen.call("exp", t - mn)))
            w.line(ir.Assign(el, mn))
        elif fn in ("max", "min"):
            w.line(ir.Assign(el, gen.call("f" + fn, el, t)))
        elif fn == "prod":
            w.line(ir.Assign(el, t, "*="))
        else:
            w.line(ir.Assign(el, t, "+="))

    _over(gen, acc.free, xenv, lambda e: _over(gen, inner, e, add))


def _bind(gen: KernelGen, acc: _Acc) -> None:
    node = acc.node
    scale: Expr | None = None
    if acc.norm is not None:
        rule = STREAM_ACCUMULATORS[type(acc.norm.op)]
        scale = gen.let(rule.scale(gen, acc.norm, acc.state), "scale")
    elif getattr(node.op, "fn", "") == "mean":
        scale = gen.recip(math.prod(gen.size(c) for c in _contracted(node)))

    def expr(index: Mapping[Axis, Expr]) -> Expr:
        e: Expr = acc.at(gen, index)
        if acc.aux is not None:  # m + log(l); a +inf maximum is the answer itself
            finite = e.cmp("<", gen.lit(math.inf))
            return ir.Select(finite, e + gen.call("log", acc.sum_at(gen, index)), e)
        if scale is not None:
            e = e * scale
        if isinstance(node.op, L.Linear) and node.op.bias:
            e = e + gen.param(node, "bias", index)
        return e

    gen.bound[node.outputs[0]] = expr
