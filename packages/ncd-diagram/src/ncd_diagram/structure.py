"""The layout-free diagram: boxes for ops, nested boxes for definitions, wires for values.

``build(graph, depth=, repeat=)`` walks ``graph.nodes`` once and groups them by ``graph.scopes``
into a tree of items. A definition deeper than ``depth`` stays one closed box; a run of
consecutive sibling definitions with the same structure, each feeding only the next (the
blocks of a GPT), becomes one ``Repeat`` item marked xN whose body is the first of them.
Every item knows the values it reads (``inputs``) and the values it hands outward
(``outputs``); wires are those values, drawn one line per axis.
"""

from __future__ import annotations

from collections.abc import Callable, Hashable
from typing import Any

import attrs

from ncd.axis import Axis
from ncd.graph import Graph, Node
from ncd.primitives.library import Einsum, Linear, Reduce, View
from ncd.walk import boundary

__all__ = ["TIMES", "Block", "Item", "OpBox", "Repeat", "build"]

TIMES = "\u00d7"  # the multiplication sign of the xN mark


@attrs.define(eq=False)
class Item:
    """Something drawn as one box at its parent's level."""

    id: str
    inputs: list[int]
    outputs: list[int]

    @property
    def label(self) -> str:
        raise NotImplementedError


@attrs.define(eq=False)
class OpBox(Item):
    """One op node."""

    node: int = 0
    op_label: str = ""
    kind: str = ""
    category: str = ""
    learned: tuple[str, ...] = ()  # full parameter names
    loop: tuple[Axis, ...] = ()
    core_in: tuple[tuple[Axis, ...], ...] = ()
    core_out: tuple[tuple[Axis, ...], ...] = ()
    contracted: tuple[Axis, ...] = ()
    through: tuple[tuple[Axis, Axis], ...] = ()

    @property
    def label(self) -> str:
        return self.op_label


@attrs.define(eq=False)
class Block(Item):
    """A named definition (a scope): open (``children`` drawn inside) or closed."""

    scope: int = 0
    name: str = ""
    scope_label: str = ""
    depth: int = 0
    nodes: list[int] = attrs.Factory(list)
    children: list[Item] = attrs.Factory(list)
    open: bool = True

    @property
    def label(self) -> str:
        if self.scope_label and self.scope_label != self.name:
            return f"{self.scope_label} ({self.name})"
        return self.name


@attrs.define(eq=False)
class Repeat(Item):
    """``count`` structurally identical blocks in a chain, drawn once (the first) marked xN."""

    blocks: list[Block] = attrs.Factory(list)

    @property
    def body(self) -> Block:
        return self.blocks[0]

    @property
    def count(self) -> int:
        return len(self.blocks)

    @property
    def label(self) -> str:
        first, last = self.blocks[0], self.blocks[-1]
        span = f"{first.scope_label} … {last.scope_label}" if first.scope_label else first.name
        return f"{span} ({first.name})"


def build(graph: Graph, depth: int | None = None, repeat: bool = True) -> Block:
    """The item tree of ``graph``: the root block (always open) holding everything."""
    chains = [graph.scope_ids(n.scope) for n in graph.nodes]
    root = graph.scopes[0]
    top = Block(
        "s0",
        list(graph.inputs),
        list(graph.outputs),
        scope=0,
        name=root.name,
        scope_label=root.label,
        depth=0,
        nodes=list(range(len(graph.nodes))),
    )
    _fill(graph, top, chains, depth, repeat)
    return top


def _fill(
    graph: Graph, block: Block, chains: list[tuple[int, ...]], depth: int | None, repeat: bool
) -> None:
    """Create the children of an open block from its member nodes (in node order)."""
    children: list[Item] = []
    sub: dict[int, Block] = {}
    level = block.depth  # index into a node's scope chain of the child scope
    for i in block.nodes:
        chain = chains[i]
        if len(chain) <= level:
            children.append(_op_box(graph, i))
            continue
        s = chain[level]
        if s not in sub:
            scope = graph.scopes[s]
            sub[s] = Block(
                f"s{s}", [], [], scope=s, name=scope.name, scope_label=scope.label, depth=level + 1
            )
            children.append(sub[s])
        sub[s].nodes.append(i)
    for b in sub.values():
        b.inputs, b.outputs = _io(graph, b.nodes)
        b.open = depth is None or b.depth <= depth
        if b.open:
            _fill(graph, b, chains, depth, repeat)
    block.children = _repeats(graph, children) if repeat else children


def _einsum_through(op: Any) -> list[tuple[Axis, Axis]]:
    kept = {a for g in op.inputs for a in g} & set(op.output)
    return [(a, a) for a in op.output if a in kept]


def _view_through(op: Any) -> list[tuple[Axis, Axis]]:
    """An input axis runs into every output axis it shares an elementary part with."""
    parts = {a: set(p) for a, p in zip(op.out_axes, op.out_parts, strict=True)}
    return [
        (i, o)
        for i, ip in zip(op.in_axes, op.in_parts, strict=True)
        for o in op.out_axes
        if parts[o] & set(ip)
    ]


#: Per op class: the core axes summed away inside the box (their wires meet at a dot).
CONTRACTED: dict[type, Callable[[Any], tuple[Axis, ...]]] = {
    Einsum: lambda op: op.contracted,
    Linear: lambda op: op.in_axes,
    Reduce: lambda op: op.axes_,
}
#: Per op class: (input axis, output axis) pairs drawn running straight through the box.
THROUGH: dict[type, Callable[[Any], list[tuple[Axis, Axis]]]] = {
    Einsum: _einsum_through,
    View: _view_through,
}


def _op_box(graph: Graph, i: int) -> OpBox:
    node = graph.nodes[i]
    op = node.op
    contracted = CONTRACTED.get(type(op), lambda _: ())(op)
    through = THROUGH.get(type(op), lambda _: [])(op)
    return OpBox(
        f"n{i}",
        list(node.inputs),
        list(node.outputs),
        node=i,
        op_label=op.label,
        kind=op.kind,
        category=op.category,
        learned=tuple(name for name, _ in node.params()),
        loop=node.loop,
        core_in=node.core_in,
        core_out=node.core_out,
        contracted=tuple(contracted),
        through=tuple(through),
    )


def _io(graph: Graph, nodes: list[int]) -> tuple[list[int], list[int]]:
    reads, writes = boundary(graph, nodes)
    return list(reads), list(writes)


def _signature(graph: Graph, block: Block) -> Hashable:
    """Structure of a block up to parameter paths: ops, loops, sub-scopes and internal wiring."""
    local: dict[int, Any] = {v: ("in", k) for k, v in enumerate(block.inputs)}
    items = []
    for j, i in enumerate(block.nodes):
        node: Node = graph.nodes[i]
        chain = tuple(
            (graph.scopes[s].name, graph.scopes[s].label)
            for s in graph.scope_ids(node.scope)[block.depth :]
        )
        items.append(
            (
                node.op,
                tuple(a.uid for a in node.loop),
                chain,
                tuple(local.get(v, ("?", v)) for v in node.inputs),
                tuple(graph.values[v] for v in node.outputs),
            )
        )
        for m, v in enumerate(node.outputs):
            local[v] = ("n", j, m)
    outs = tuple(local[v] for v in block.outputs)
    return block.name, tuple(items), outs


def _repeats(graph: Graph, children: list[Item]) -> list[Item]:
    """Fold runs of identical chained blocks into ``Repeat`` items."""
    out: list[Item] = []
    sigs: dict[str, Hashable] = {}

    def sig(b: Block) -> Hashable:
        if b.id not in sigs:
            sigs[b.id] = _signature(graph, b)
        return sigs[b.id]

    run: list[Block] = []

    def flush() -> None:
        if len(run) > 1:
            first, last = run[0], run[-1]
            out.append(
                Repeat(f"r{first.scope}", list(first.inputs), list(last.outputs), blocks=list(run))
            )
        else:
            out.extend(run)
        run.clear()

    for item in children:
        if (
            isinstance(item, Block)
            and run
            and _follows(graph, run[-1], item)
            and sig(item) == sig(run[-1])
        ):
            run.append(item)
            continue
        flush()
        if isinstance(item, Block):
            run.append(item)
        else:
            out.append(item)
    flush()
    return out


def _follows(graph: Graph, prev: Block, nxt: Block) -> bool:
    """``nxt`` reads exactly ``prev``'s outputs, and nothing else reads them."""
    if nxt.inputs != prev.outputs:
        return False
    members = set(nxt.nodes)
    outs = set(graph.outputs)
    return all(
        v not in outs and all(c in members for c in graph.consumers[v]) for v in prev.outputs
    )
