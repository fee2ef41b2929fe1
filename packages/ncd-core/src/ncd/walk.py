"""The one walk of a graph that every interpretation shares, and the rule lookup of its tables.

Interpretations of a graph (the NumPy reference, torch export, FLOP counting, the diagrams) are
rule tables keyed by op class; the structure is walked here, in core, so no plugin writes its
own traversal:

- ``rule_for(table, op)``: an op's rule, found by its class or the nearest base class that has
  one (a plugin's subclass of a built-in op inherits the built-in's rules);
- ``forward(graph, inputs, step)``: values flow through the nodes in topological order, each
  node's ``step`` mapping its input values to its outputs;
- ``boundary(graph, nodes)``: the values a set of nodes reads from outside it, and those it
  hands outward (read outside the set, or graph outputs): a kernel's, a submodule's, a
  diagram block's ports;
- ``runs(graph, nodes, child)``: consecutive nodes split into maximal runs lying in the same
  child scope (``child(node)`` names it, ``None`` for the current scope), the hierarchy walk
  of torch export and the diagrams.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from typing import Any, TypeVar

from ncd.graph import Graph, Node

__all__ = ["boundary", "forward", "rule_for", "runs"]

R = TypeVar("R")
V = TypeVar("V")


def rule_for(table: Mapping[type, R], op: object) -> R | None:
    """The rule of ``op``'s class in ``table``, else of its nearest base class; ``None``
    when no class of its MRO has one."""
    for cls in type(op).__mro__:
        rule = table.get(cls)
        if rule is not None:
            return rule
    return None


def forward(
    graph: Graph,
    inputs: Sequence[V],
    step: Callable[[int, Node, list[V]], Sequence[V]],
) -> list[V]:
    """Run ``step(index, node, input values)`` over the nodes in order, binding each node's
    outputs to what it returns; the values of the graph outputs."""
    env: dict[int, V] = dict(zip(graph.inputs, inputs, strict=True))
    for i, node in enumerate(graph.nodes):
        outs = step(i, node, [env[v] for v in node.inputs])
        env.update(zip(node.outputs, outs, strict=True))
    return [env[v] for v in graph.outputs]


def boundary(graph: Graph, nodes: Iterable[int]) -> tuple[tuple[int, ...], tuple[int, ...]]:
    """(values the nodes read from outside, in first-read order; values they must hand
    outward: read by a node outside the set, or graph outputs, in production order)."""
    order = sorted(set(nodes))
    members = set(order)
    produced = {v for i in order for v in graph.nodes[i].outputs}
    reads: dict[int, None] = {}
    for i in order:
        for v in graph.nodes[i].inputs:
            if v not in produced:
                reads.setdefault(v)
    outs = set(graph.outputs)
    writes = [
        v
        for i in order
        for v in graph.nodes[i].outputs
        if v in outs or any(c not in members for c in graph.consumers[v])
    ]
    return tuple(reads), tuple(writes)


def runs(
    graph: Graph, nodes: Sequence[int], child: Callable[[Node], Any]
) -> Iterator[tuple[Any, list[int]]]:
    """``(child, run)`` for each maximal run of consecutive ``nodes`` with the same
    ``child(graph.nodes[i])`` (``None``: the node belongs to the scope being walked)."""
    pos = 0
    while pos < len(nodes):
        key = child(graph.nodes[nodes[pos]])
        end = pos + 1
        while end < len(nodes) and child(graph.nodes[nodes[end]]) == key:
            end += 1
        yield key, list(nodes[pos:end])
        pos = end
