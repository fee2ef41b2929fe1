"""The graph IR: an SSA, acyclic hypergraph of op nodes over typed values.

Values are numbered; graph inputs come first and every other value has exactly one producing
node. Nodes are stored in topological order with their (substituted) op, whose fields name the
concrete core axes, and their loop (lifted) axes. Scopes keep the hierarchy of named
definitions. Identity, copy, swap and discard are wiring: they leave no node.
"""

from __future__ import annotations

import functools
from collections.abc import Hashable, Iterator, Mapping
from typing import Any, Protocol, runtime_checkable

import attrs

from ncd.axis import MAX_SIZE, ArrayType, Axis, check_name, show
from ncd.errors import DefinitionError, SizeError
from ncd.op import Op, Param
from ncd.sizes import Config, SizeSolver, SizeVar, unique_labels

__all__ = ["MAX_ELEMENTS", "Graph", "Model", "Node", "Scope", "as_graph"]

#: The most elements one value may have: counts and offsets must fit a signed 64-bit int.
MAX_ELEMENTS = 2**63 - 1


@attrs.frozen
class Scope:
    """A named definition instance: ``name`` is its kind (``transformer_block``), ``label`` its
    instance name in parameter paths (``blocks.0``); ``parent`` indexes the enclosing scope."""

    name: str = attrs.field()
    label: str = attrs.field(default="")
    parent: int | None = attrs.field(default=None)

    @name.validator
    def _check_name(self, _: Any, value: str) -> None:
        check_name("a scope (definition) name", value)

    @label.validator
    def _check_label(self, _: Any, value: str) -> None:
        check_name(f"the label of scope {self.name!r}", value, empty=True)

    @parent.validator
    def _check_parent(self, _: Any, value: int | None) -> None:
        if value is not None and (
            isinstance(value, bool) or not isinstance(value, int) or value < 0
        ):
            raise DefinitionError(
                f"a scope's parent must be a scope index or None, got "
                f"{show(value)}. Fix: pass the index of the enclosing scope."
            )


@attrs.frozen
class Node:
    """One op instance: the op (concrete axes), its input/output value ids, loop axes, scope."""

    op: Op
    inputs: tuple[int, ...]
    outputs: tuple[int, ...]
    loop: tuple[Axis, ...]
    scope: int = 0
    path: str = ""
    site: str = attrs.field(default="", eq=False)

    @property
    def core_in(self) -> tuple[tuple[Axis, ...], ...]:
        return self.op.signature()[0]

    @property
    def core_out(self) -> tuple[tuple[Axis, ...], ...]:
        return self.op.signature()[1]

    def param_name(self, param: str) -> str:
        """The full dotted name of one of this node's parameters."""
        return f"{self.path}.{param}" if self.path else param

    def params(self) -> Iterator[tuple[str, Param]]:
        for p in self.op.params():
            yield self.param_name(p.name), p


@attrs.frozen(eq=False)
class Graph:
    """A lowered model. Build one through a term's ``.graph``, never by hand."""

    axes: tuple[Axis, ...]
    values: tuple[ArrayType, ...]
    nodes: tuple[Node, ...]
    inputs: tuple[int, ...]
    outputs: tuple[int, ...]
    scopes: tuple[Scope, ...] = (Scope("model"),)

    def __attrs_post_init__(self) -> None:
        for t in self.values:
            count = 1
            for a in t.axes:
                count *= a.size or 1
            if count > MAX_ELEMENTS:
                raise SizeError(
                    f"a value {t} ({', '.join(a.describe() for a in t.axes)}) would have {count} "
                    f"elements, more than a 64-bit count holds ({MAX_ELEMENTS}). Fix: bind "
                    "smaller sizes."
                )

    # -- queries -------------------------------------------------------------------------------
    @functools.cached_property
    def producers(self) -> dict[int, int]:
        """value id -> index of the node producing it."""
        return {v: i for i, n in enumerate(self.nodes) for v in n.outputs}

    @functools.cached_property
    def consumers(self) -> dict[int, list[int]]:
        """value id -> indices of the nodes reading it (graph outputs are not counted)."""
        out: dict[int, list[int]] = {v: [] for v in range(len(self.values))}
        for i, n in enumerate(self.nodes):
            for v in n.inputs:
                out[v].append(i)
        return out

    @functools.cached_property
    def axis_by_uid(self) -> dict[str, Axis]:
        return {a.uid: a for a in self.axes}

    def size(self, axis: Axis) -> int | None:
        """The size of ``axis`` in this graph (``None`` when free)."""
        return self.axis_by_uid[axis.uid].size

    def shape(self, value: int) -> tuple[int, ...]:
        """The concrete shape of a value; raises ``SizeError`` if a size is free."""
        sizes = [self.size(a) for a in self.values[value].axes]
        if any(s is None for s in sizes):
            free = [a.describe() for a in self.values[value].axes if self.size(a) is None]
            raise SizeError(f"value {value} has free axes {free}; bind them with model.bind(...)")
        return tuple(s for s in sizes if s is not None)

    def params(self) -> dict[str, Param]:
        """Every learned parameter by full name, in node order."""
        return {name: p for n in self.nodes for name, p in n.params()}

    def scope_ids(self, scope: int) -> tuple[int, ...]:
        """Scope ids from the root's child down to ``scope`` (empty for the root)."""
        chain = []
        s: int | None = scope
        while s is not None and s != 0:
            chain.append(s)
            s = self.scopes[s].parent
        return tuple(reversed(chain))

    def scope_path(self, scope: int) -> tuple[Scope, ...]:
        """Scopes from the root's child down to ``scope``."""
        return tuple(self.scopes[s] for s in self.scope_ids(scope))

    def scope_prefix(self, scope: int) -> str:
        """The parameter prefix of a scope: its non-empty labels joined with dots."""
        return ".".join(s.label for s in self.scope_path(scope) if s.label)

    # -- sizes ---------------------------------------------------------------------------------
    def _solver(self) -> SizeSolver:
        solver = SizeSolver()
        for a in self.axes:
            solver.add(a)
        for n in self.nodes:
            for c in n.op.constraints():
                solver.add_constraint(c, f"{n.op.label} at {n.site or '?'}")
        return solver

    @functools.cached_property
    def _classes(self) -> list[tuple[str, list[Axis]]]:
        solver = self._solver()
        classes: dict[str, list[Axis]] = {}
        for a in self.axes:
            classes.setdefault(solver.find(a.uid), []).append(a)
        return list(classes.items())

    def config(self) -> Config:
        """The free sizes (configurable axes) under unique labels, and the bound ones."""
        derived = {a.uid for n in self.nodes for a in n.op.derived_axes()}
        entries = [
            (members, members[0].size)
            for _, members in self._classes
            if not any(m.uid in derived for m in members)
        ]
        labels = unique_labels([m[0].name for m, _ in entries])
        free = tuple(SizeVar(lb, tuple(m)) for lb, (m, s) in zip(labels, entries) if s is None)
        bound = tuple(
            SizeVar(lb, tuple(m), s) for lb, (m, s) in zip(labels, entries) if s is not None
        )
        return Config(free, bound)

    def bind(self, sizes: Mapping[str | Axis, int] | None = None, /, **kw: int) -> Graph:
        """A copy with sizes bound by config label or by Axis; all conflicts reported together."""
        wanted: dict[str | Axis, int] = dict(sizes or {})
        wanted.update(kw)
        config = self.config()
        labels = {v.label: v for v in (*config.free, *config.bound)}
        solver = self._solver()
        unknown = []
        for key, size in wanted.items():
            if isinstance(size, bool) or not isinstance(size, int) or not 1 <= size <= MAX_SIZE:
                raise SizeError(
                    f"size for {key!r} must be a positive int <= 2^62, got {show(size)}. Fix: bind "
                    "the size the axis really has."
                )
            if isinstance(key, Axis):
                if key.uid not in self.axis_by_uid:
                    unknown.append(key.describe())
                    continue
                solver.set(key, size, f"bound as {key.ref}={size}")
            elif key in labels:
                solver.set(labels[key].axes[0], size, f"bound as {key}={size}")
            else:
                unknown.append(repr(key))
        if unknown:
            raise SizeError(
                f"unknown size label(s) {', '.join(unknown)}; this model's labels are: "
                f"{', '.join(labels) or '(none)'}"
            )
        solver.solve()
        solver.check("bind")
        return self.with_sizes({a.uid: solver.size(a.uid) for a in self.axes})

    def with_sizes(self, sizes: Mapping[str, int | None]) -> Graph:
        """A copy whose axes carry the given sizes (by uid); structure unchanged."""
        new = {a.uid: a.with_size(sizes.get(a.uid, a.size)) for a in self.axes}
        return _substitute(self, new)

    # -- identity ------------------------------------------------------------------------------
    @functools.cached_property
    def key(self) -> Hashable:
        """The canonical form (``ncd.canonical.graph_key``), which defines graph equality and
        keys the caches of backends."""
        from ncd.canonical import graph_key

        return graph_key(self)

    def canonical(self) -> dict[str, Any]:
        """The interchange form (``ncd.serialize``): equal graphs have equal interchange forms."""
        from ncd.serialize import graph_to_dict

        return graph_to_dict(self)

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Graph) and (self is other or self.key == other.key)

    def __hash__(self) -> int:
        return hash(self.key)

    def verify(self) -> None:
        """Check every whole-graph invariant; raise ``GraphError`` listing all violations."""
        from ncd._verify import verify

        verify(self)


def _substitute(graph: Graph, new: dict[str, Axis]) -> Graph:
    def fn(a: Axis) -> Axis:
        return new[a.uid]

    values = tuple(ArrayType(tuple(fn(a) for a in t.axes), t.dtype) for t in graph.values)
    nodes = tuple(
        attrs.evolve(n, op=n.op.substitute(fn), loop=tuple(fn(a) for a in n.loop))
        for n in graph.nodes
    )
    return attrs.evolve(
        graph, axes=tuple(new[a.uid] for a in graph.axes), values=values, nodes=nodes
    )


@runtime_checkable
class Model(Protocol):
    """What the low layers (reference, fusion, kernels, cost models, diagrams, exporters) take
    as a model: anything with a ``graph`` (terms, traced and loaded models), or a ``Graph``
    itself. They reach graphs through ``as_graph`` and never import the term classes."""

    @property
    def graph(self) -> Graph: ...


def as_graph(model: object, what: str) -> Graph:
    """The graph of ``model`` (a ``Graph`` or a ``Model``); anything else is a
    ``DefinitionError`` for ``what`` (the function the user called)."""
    if isinstance(model, Graph):
        return model
    if isinstance(model, Model):
        graph = model.graph
        if isinstance(graph, Graph):
            return graph
    raise DefinitionError(
        f"{what} takes a model (an ncd term or graph), got "
        f"{type(model).__name__} {show(model)}. Fix: pass e.g. ncd.nn.mlp()."
    )
