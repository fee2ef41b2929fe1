"""Canonical forms of graphs and ops: what graph equality, build caches and the interchange
format agree on, computed here once instead of through the serializer.

``op_fields(op, number)`` gives an op's fields with every axis replaced by ``number(axis)``
(nested as the op's template nests them); ``graph_key(graph)`` is a hashable tuple that two
graphs share exactly when they are equal: same axes (uids, names, sizes), value types, inputs,
outputs, scopes and nodes (op kind, name, fields, wiring, loops, scope, parameter path).
"""

from __future__ import annotations

from collections.abc import Callable, Hashable
from typing import TYPE_CHECKING, Any

import attrs

from ncd.axis import Axis

if TYPE_CHECKING:
    from ncd.graph import Graph
    from ncd.op import Op

__all__ = ["graph_key", "op_fields"]


def op_fields(op: Op, number: Callable[[Axis], Any], *, freeze: bool = False) -> dict[str, Any]:
    """The op's fields (all but its instance name) with axes numbered; ``freeze``: tuples
    instead of lists, so the result can be hashed."""
    seq: Callable[[Any], Any] = tuple if freeze else list

    def value(depth: int | None, v: Any) -> Any:
        if depth == 1:
            return number(v)
        if depth == 2:
            return seq(number(a) for a in v)
        if depth == 3:
            return seq(seq(number(a) for a in g) for g in v)
        return seq(v) if isinstance(v, tuple) else v

    return {
        f.name: value(f.metadata.get("axes"), getattr(op, f.name))
        for f in attrs.fields(type(op))
        if f.name != "name"
    }


def graph_key(graph: Graph) -> Hashable:
    """A hashable canonical form of ``graph``; equal graphs (``==``) have equal keys."""
    index = {a.uid: i for i, a in enumerate(graph.axes)}

    def number(a: Axis) -> int:
        return index[a.uid]

    axes = tuple((a.name, a.uid, a.size) for a in graph.axes)
    values = tuple((tuple(number(a) for a in t.axes), str(t.dtype)) for t in graph.values)
    scopes = tuple((s.name, s.label, s.parent) for s in graph.scopes)
    nodes = tuple(
        (
            n.op.kind,
            n.op.name,
            tuple(sorted(op_fields(n.op, number, freeze=True).items())),
            n.inputs,
            n.outputs,
            tuple(number(a) for a in n.loop),
            n.scope,
            n.path,
        )
        for n in graph.nodes
    )
    return (axes, values, tuple(graph.inputs), tuple(graph.outputs), scopes, nodes)
