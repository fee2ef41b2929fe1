"""Terms: the cheap immutable values users compose, and how each lowers itself.

``f >> g`` feeds f's outputs to g's first inputs (g's extra inputs become inputs of the whole,
f's extra outputs pass through); ``f @ g`` runs both side by side; ``f.over(a)`` lifts f over
new axes; ``f.named(...)`` makes a definition that stays a named block in the graph. A model
is lowered once, by one builder, and the graph is cached on the term.
"""

from __future__ import annotations

import hashlib
import json
import os
import sys
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

import attrs

from ncd._lower import Builder, Hole, Ref
from ncd.axis import ArrayType, Axis, AxisLike, check_name, show
from ncd.dtypes import DType
from ncd.errors import AlignmentError, DefinitionError, TraceError
from ncd.graph import Graph, Scope
from ncd.op import Op

if TYPE_CHECKING:
    from ncd.sizes import Config

__all__ = [
    "Def",
    "GraphTerm",
    "Over",
    "Par",
    "Prim",
    "Seq",
    "Term",
    "Wire",
    "copy",
    "discard",
    "identity",
    "swap",
]

_PKG_DIR = os.path.dirname(os.path.abspath(__file__))
_INTERNAL = {os.path.join(_PKG_DIR, f) for f in ("_term.py", "_trace.py", "_lower.py", "scan.py")}
_INTERNAL_DIRS = (os.path.join(_PKG_DIR, "ops"), os.path.join(_PKG_DIR, "op.py"))


def call_site() -> str:
    """``file:line`` of the first caller outside ncd's term machinery."""
    frame = sys._getframe(1)
    while frame is not None:
        fname = frame.f_code.co_filename
        if fname not in _INTERNAL and not fname.startswith(_INTERNAL_DIRS):
            return f"{os.path.basename(fname)}:{frame.f_lineno}"
        frame = frame.f_back  # type: ignore[assignment]
    return "?"


class Term:
    """A symbolic model: compose with ``>>``, ``@``, ``.over()``, ``.named()``."""

    __slots__ = ("_digest", "_graph", "n_in", "n_out", "site")

    def __init__(self, n_in: int, n_out: int, site: str | None = None) -> None:
        self.n_in = n_in
        self.n_out = n_out
        self.site = site or call_site()
        self._graph: Graph | None = None
        self._digest: str | None = None

    # -- composition -------------------------------------------------------------------------------
    def __rshift__(self, other: Term) -> Term:
        return Seq(self, _term("f >> g", other))

    def __rrshift__(self, other: object) -> Term:
        return Seq(_term("f >> g", other), self)

    def __matmul__(self, other: Term) -> Term:
        return Par(self, _term("f @ g", other))

    def __rmatmul__(self, other: object) -> Term:
        return Par(_term("f @ g", other), self)

    def over(self, *axes: AxisLike) -> Term:
        """Lift over new leading axes: every input gains them, one instance runs per index."""
        for a in axes:
            if not isinstance(a, Axis | str):
                raise DefinitionError(
                    f".over() takes axes or axis names, got {show(a)}. Fix: pass "
                    "e.g. .over('batch') or .over(ncd.Axis('batch', size=8))."
                )
        return Over(self, tuple(a if isinstance(a, Axis) else Axis(a) for a in axes))

    def cast(self, dtype: object) -> Term:
        """The same model in the float format ``dtype`` (``ncd.bfloat16``, ``"float16"``,
        ``np.float64``...): every op's parameters, float inputs and float outputs use it, and
        the reference interpreter accumulates in ``dtype.accumulate``. Integer wires (token ids)
        keep their type; an ``ops.cast`` to a float format becomes a cast to ``dtype`` (the whole
        model is in one format: cast parts, not the whole, for mixed precision). Names, scopes
        and parameter names are unchanged; the result composes like any term."""
        from ncd.dtypes import dtype as to_dtype
        from ncd.op import _op_format

        fmt = _op_format(to_dtype(dtype))
        assert fmt is not None
        return GraphTerm(cast_graph(self.graph, fmt), site=call_site())

    def named(self, name: str, label: str | None = None) -> Term:
        """A definition: stays a named block (``name`` its kind, ``label`` its parameter prefix)."""
        check_name("a definition's name", name)
        if label is not None:
            check_name(f"the label of definition {name!r}", label, empty=True)
        return Def(self, name, name if label is None else label)

    # -- lowering ----------------------------------------------------------------------------------
    def lower(self, b: Builder, ins: Sequence[Ref]) -> list[Ref]:
        raise NotImplementedError

    def root(self) -> tuple[Scope | None, Term]:
        """The definition this term is when lowered as a whole model, seen through lifting and
        binding: its scope and the term to lower inside it, or ``(None, self)``.

        The model's own definition is the graph's root scope, whose label prefixes no parameter,
        so ``gpt``, ``gpt.over(batch)`` and ``gpt.bind(...)`` name their parameters alike; a
        definition nested in a composition (``f.named("a") >> g``) prefixes its own."""
        return None, self

    @property
    def graph(self) -> Graph:
        """The lowered graph (built once, then cached)."""
        if self._graph is None:
            self._graph = lower_term(self)
        return self._graph

    # -- the model API -----------------------------------------------------------------------------
    def config(self) -> Config:
        """Free sizes the model exposes, under unique labels."""
        return self.graph.config()

    def bind(self, sizes: Mapping[str | Axis, int] | None = None, /, **kw: int) -> Term:
        """A model with sizes bound by config label (``seq=16``) or Axis (``{q: 16}``)."""
        return GraphTerm(self.graph.bind(sizes, **kw))

    def explain(self) -> str:
        """One line per op: ``name: [core] over (loop ...)``, indented by definition."""
        from ncd._explain import explain

        return explain(self.graph)

    @property
    def domain(self) -> tuple[ArrayType, ...]:
        g = self.graph
        return tuple(g.values[v] for v in g.inputs)

    @property
    def codomain(self) -> tuple[ArrayType, ...]:
        g = self.graph
        return tuple(g.values[v] for v in g.outputs)

    def digest(self) -> str:
        """A hash of the canonical graph (equal models have equal digests)."""
        if self._digest is None:
            text = json.dumps(self.graph.canonical(), sort_keys=True, separators=(",", ":"))
            self._digest = hashlib.sha256(text.encode()).hexdigest()
        return self._digest

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, Term):
            return NotImplemented
        return self is other or self.digest() == other.digest()

    def __hash__(self) -> int:
        return hash(self.digest())

    def __call__(self, *args: Any) -> Any:
        """Apply inside a traced function (``ncd.trace``) to symbolic tensors."""
        from ncd._trace import apply_term

        return apply_term(self, args)

    def _repr_svg_(self) -> str | None:
        from ncd.plugins import registry

        reg = registry()
        return None if reg.renderer_for("svg") is None else str(reg.render(self, "svg"))

    def __repr__(self) -> str:
        return f"<{type(self).__name__} {self.n_in}->{self.n_out} built at {self.site}>"


def _term(where: str, value: object) -> Term:
    if not isinstance(value, Term):
        raise DefinitionError(
            f"{where} composes terms, got {type(value).__name__} {show(value)}. Fix: wrap values "
            "as terms (ops.constant(...), ncd.identity(...)), or call terms on tensors inside "
            "ncd.trace."
        )
    return value


def lower_term(term: Term) -> Graph:
    """Lower a term once with a fresh builder."""
    if isinstance(term, GraphTerm):
        return term.stored
    scope, inner = term.root()
    b = Builder(scope)
    outs = inner.lower(b, [b.new_slot() for _ in range(term.n_in)])
    return b.finish(outs)


class Prim(Term):
    """A primitive op as a term."""

    __slots__ = ("op",)

    def __init__(self, op: Op, site: str | None = None) -> None:
        n_in, n_out = (len(s) for s in op.signature())
        super().__init__(n_in, n_out, site)
        self.op = op

    def lower(self, b: Builder, ins: Sequence[Ref]) -> list[Ref]:
        return list(b.apply(self.op, ins, self.site))


class Seq(Term):
    """``f >> g``."""

    __slots__ = ("f", "g")

    def __init__(self, f: Term, g: Term) -> None:
        extra_in = max(0, g.n_in - f.n_out)
        extra_out = max(0, f.n_out - g.n_in)
        super().__init__(f.n_in + extra_in, g.n_out + extra_out)
        self.f, self.g = f, g

    def lower(self, b: Builder, ins: Sequence[Ref]) -> list[Ref]:
        f, g = self.f, self.g
        mid = f.lower(b, ins[: f.n_in])
        outs = g.lower(b, [*mid[: g.n_in], *ins[f.n_in :]])
        return [*outs, *mid[g.n_in :]]


class Par(Term):
    """``f @ g``."""

    __slots__ = ("f", "g")

    def __init__(self, f: Term, g: Term) -> None:
        super().__init__(f.n_in + g.n_in, f.n_out + g.n_out)
        self.f, self.g = f, g

    def lower(self, b: Builder, ins: Sequence[Ref]) -> list[Ref]:
        return [*self.f.lower(b, ins[: self.f.n_in]), *self.g.lower(b, ins[self.f.n_in :])]


class Over(Term):
    """``f.over(a, ...)``: inputs gain the lifted axes; ops that see them loop over them."""

    __slots__ = ("axes", "f")

    def __init__(self, f: Term, axes: tuple[Axis, ...], site: str | None = None) -> None:
        super().__init__(f.n_in, f.n_out, site)
        self.f, self.axes = f, axes

    def root(self) -> tuple[Scope | None, Term]:
        scope, inner = self.f.root()
        return (None, self) if scope is None else (scope, Over(inner, self.axes, self.site))

    def lower(self, b: Builder, ins: Sequence[Ref]) -> list[Ref]:
        lifted: list[Ref] = []
        for ref in ins:
            v = b.value_of(ref)
            if v is None:
                assert isinstance(ref, Hole)
                lifted.append(ref.lifted(self.axes))
                continue
            have = set(b.values[v].axes)
            missing = [a for a in self.axes if b.resolve(a) not in have]
            if missing:
                raise AlignmentError(
                    f".over({', '.join(a.describe() for a in missing)}) (built at {self.site}) "
                    f"receives {b.describe_value(v)}, which does not carry those axes. Fix: lift "
                    "the producer too, or let alignment lift implicitly by dropping .over()."
                )
            lifted.append(ref)
        return self.f.lower(b, lifted)


class Def(Term):
    """A named definition (a block that stays a block in the graph)."""

    __slots__ = ("body", "label", "name")

    def __init__(self, body: Term, name: str, label: str) -> None:
        super().__init__(body.n_in, body.n_out)
        self.body, self.name, self.label = body, name, label

    def root(self) -> tuple[Scope | None, Term]:
        return Scope(self.name, self.label), self.body

    def lower(self, b: Builder, ins: Sequence[Ref]) -> list[Ref]:
        prev = b.enter(self.name, self.label)
        try:
            return self.body.lower(b, ins)
        finally:
            b.leave(prev)


class GraphTerm(Term):
    """A graph (loaded, traced or bound) used as a term: lowering replays its nodes."""

    __slots__ = ("stored",)

    def __init__(self, graph: Graph, site: str | None = None) -> None:
        super().__init__(len(graph.inputs), len(graph.outputs), site)
        self.stored = graph
        self._graph = graph

    def root(self) -> tuple[Scope | None, Term]:
        scope = self.stored.scopes[0]
        if not _is_definition(scope):
            return None, self
        return scope, _Replay(self.stored, self.site)

    def lower(self, b: Builder, ins: Sequence[Ref]) -> list[Ref]:
        g = self.stored
        root = g.scopes[0]
        prev = b.enter(root.name, root.label) if _is_definition(root) else None
        outs = replay_nodes(b, g, ins, self.site)
        if prev is not None:
            b.leave(prev)
        return outs


class _Replay(GraphTerm):
    """A stored graph replayed in the builder's current scope (its root scope already is)."""

    __slots__ = ()

    def root(self) -> tuple[Scope | None, Term]:
        return None, self

    def lower(self, b: Builder, ins: Sequence[Ref]) -> list[Ref]:
        return replay_nodes(b, self.stored, ins, self.site)


def _is_definition(scope: Scope) -> bool:
    """Whether a graph's root scope is a named definition (not the anonymous ``model``)."""
    return scope.name != "model" or bool(scope.label)


def replay_nodes(b: Builder, g: Graph, ins: Sequence[Ref], site: str) -> list[Ref]:
    """Re-apply a graph's nodes in the builder's current scope (the graph's root maps to it)."""
    scope_map = {0: b.scope}
    env: dict[int, Ref] = {}
    for v, ref in zip(g.inputs, ins, strict=True):
        env[v] = _replay_input(b, g.values[v], ref, site)
    outer = b.scope
    for node in g.nodes:
        b.scope = _map_scope(b, g, node.scope, scope_map)
        outs = b.apply(node.op, [env[v] for v in node.inputs], node.site or site)
        env.update(zip(node.outputs, outs, strict=True))
    b.scope = outer
    return [env[v] for v in g.outputs]


def _replay_input(b: Builder, t: ArrayType, ref: Ref, site: str) -> Ref:
    v = b.value_of(ref)
    if v is None:
        assert isinstance(ref, Hole)
        return b.materialise(ref, t)
    from ncd.primitives.library import View

    # Align the stored input type as a template (identity op): binds the graph's axes.
    b._align(
        View(
            t.axes, t.axes, tuple((a,) for a in t.axes), tuple((a,) for a in t.axes), name="input"
        ),
        site,
        0,
        t.axes,
        v,
    )
    return v


def cast_graph(g: Graph, fmt: DType) -> Graph:
    """``g`` with every op in the format ``fmt`` and every float input of that format, replayed
    through a builder so value types follow (and mixed formats are refused) as in lowering."""
    raw = Graph(
        g.axes,
        tuple(
            ArrayType(t.axes, fmt) if v in set(g.inputs) and t.is_float else t
            for v, t in enumerate(g.values)
        ),
        tuple(attrs.evolve(n, op=_cast_op(n.op, fmt)) for n in g.nodes),
        g.inputs,
        g.outputs,
        g.scopes,
    )
    b = Builder(raw.scopes[0])
    holes = [b.new_slot() for _ in raw.inputs]
    for hole, v in zip(holes, raw.inputs, strict=True):
        b.materialise(hole, raw.values[v])
    outs = replay_nodes(b, raw, holes, "cast")
    return b.finish(outs, f"the model cast to {fmt.name}")


def _cast_op(op: Op, fmt: DType) -> Op:
    from ncd.primitives.library import Cast

    if op.pinned:
        return op
    if isinstance(op, Cast) and op.to.kind == "float":
        return attrs.evolve(op, dtype=fmt, to=fmt)
    return attrs.evolve(op, dtype=fmt)


def _map_scope(b: Builder, g: Graph, s: int, scope_map: dict[int, int]) -> int:
    if s in scope_map:
        return scope_map[s]
    scope = g.scopes[s]
    parent = _map_scope(b, g, scope.parent if scope.parent is not None else 0, scope_map)
    b.scopes.append(Scope(scope.name, scope.label, parent))
    scope_map[s] = len(b.scopes) - 1
    return scope_map[s]


class Wire(Term):
    """Identity, copy, swap and discard: pure wiring, no node."""

    __slots__ = ("kind", "perm", "types")

    def __init__(
        self, kind: str, n_in: int, perm: tuple[int, ...], types: tuple[ArrayType | None, ...] = ()
    ) -> None:
        super().__init__(n_in, len(perm))
        self.kind, self.perm, self.types = kind, perm, types

    def lower(self, b: Builder, ins: Sequence[Ref]) -> list[Ref]:
        refs = list(ins)
        for i, t in enumerate(self.types):
            if t is not None and b.value_of(refs[i]) is None:
                hole = refs[i]
                assert isinstance(hole, Hole)
                refs[i] = b.materialise(hole, t)
        return [refs[i] for i in self.perm]


def identity(*types: ArrayType | Sequence[Axis] | int) -> Term:
    """Pass values through: ``identity(2)`` for two untyped wires, or give their types."""
    if len(types) == 1 and isinstance(types[0], int) and not isinstance(types[0], bool):
        n = types[0]
        if n < 0:
            raise DefinitionError(
                f"identity({show(n)}): the number of wires must be >= 0. Fix: "
                "pass a count such as identity(2)."
            )
        return Wire("identity", n, tuple(range(n)))
    ts = tuple(_array_type(t) for t in types)
    return Wire("identity", len(ts), tuple(range(len(ts))), ts)


def _array_type(t: object) -> ArrayType:
    if isinstance(t, ArrayType):
        return t
    if isinstance(t, Axis | str | int) or not isinstance(t, Sequence):
        raise DefinitionError(
            f"expected an array type or a sequence of axes, got {show(t)}. Fix: pass e.g. "
            "[q, d] or ncd.ArrayType((q, d))."
        )
    return ArrayType(tuple(t))


def copy(n: int = 2) -> Term:
    """One input, ``n`` identical outputs (using a value twice)."""
    if isinstance(n, bool) or not isinstance(n, int) or n < 1:
        raise TraceError(
            f"copy needs an int n >= 1, got {show(n)}. Fix: copy(2) uses a value twice."
        )
    return Wire("copy", 1, (0,) * n)


def discard() -> Term:
    """One input, no output."""
    return Wire("discard", 1, ())


def swap() -> Term:
    """Two inputs, returned in the other order."""
    return Wire("swap", 2, (1, 0))
