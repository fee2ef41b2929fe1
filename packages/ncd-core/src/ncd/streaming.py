"""Streamability: which axes a set of nodes can walk in chunks, and with which accumulators.

Each op says, per axis, what *role* the axis plays in it (a rule table keyed by op class):
``lift`` (a loop axis), ``map`` (a core axis kept index for index), ``sum``/``max``/``min``/
``mean`` (reduced, carried by that accumulator), ``normalise`` (softmax or L2 normaliser over
it) or ``whole`` (the op needs every index at once: layernorm, reshapes, routing).

Streaming an axis ``s`` through nodes is then decided compositionally (the fusion theorem of
*FlashAttention on a Napkin*): values are tracked as ``const`` (no ``s``), ``chunk`` (one chunk
of ``s``), ``norm`` (a normaliser's chunk whose division is pending) or ``acc`` (a finished
accumulation). A normaliser followed by a contraction over the same axis, with only homogeneous
maps between, is the normalised contraction ``sum_i a1(x_i) y_i / b(sum_j a2(x_j))``: softmax
(running-max rescale, ``online_softmax``) or L2 (``a1 = id, a2 = square, b = sqrt``, ``l2``).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from typing import Any

from ncd.axis import Axis
from ncd.errors import ScheduleError
from ncd.graph import Graph, Node
from ncd.op import Op, registrar
from ncd.primitives import library as L

__all__ = [
    "NORMALISER_KINDS",
    "ROLE_RULES",
    "REDUCING",
    "StreamAnalysis",
    "analyse_stream",
    "role",
    "role_rule",
]

RoleRule = Callable[[Any, Axis], str]

#: op class -> rule(op, axis) -> role of a core axis in that op (loop/absent are decided here).
ROLE_RULES: dict[type[Op], RoleRule] = {}

#: roles that remove an axis with a carried accumulator.
REDUCING = frozenset({"sum", "max", "min", "mean", "prod", "logsumexp"})

#: normaliser op class -> accumulator kind of the normalised contraction it starts.
NORMALISER_KINDS: dict[type[Op], str] = {L.Softmax: "online_softmax", L.L2Norm: "l2"}

#: elementwise ops that commute with a normaliser's division (positively homogeneous maps), so
#: they may sit between a normaliser and its contraction.
HOMOGENEOUS: dict[type[Op], Callable[[Any], bool]] = {
    L.Scale: lambda op: True,
    L.Dropout: lambda op: True,
    L.Scalar: lambda op: op.fn in ("mul", "div") and not op.reverse,
}


#: ``@role_rule(OpClass, ...)`` registers a role rule.
role_rule = registrar(ROLE_RULES)


def role(node: Node, axis: Axis) -> str:
    """The role ``axis`` plays in ``node``: ``absent``, ``lift`` or its op's rule."""
    if axis in node.loop:
        return "lift"
    if axis not in node.op.axes():
        return "absent"
    rule = ROLE_RULES.get(type(node.op))
    # An op without a rule is opaque: it may need every index of its core axes.
    return rule(node.op, axis) if rule is not None else "whole"


@role_rule(L.Einsum)
def _einsum(op: L.Einsum, axis: Axis) -> str:
    return "map" if axis in op.output else "sum"


@role_rule(L.Linear)
def _linear(op: L.Linear, axis: Axis) -> str:
    if set(op.in_axes) & set(op.out_axes):
        # ``linear("d -> d")``: one axis is both contracted and kept, with two different
        # indices; no axis of it streams or maps index for index
        return "whole"
    return "sum" if axis in op.in_axes else "map"


@role_rule(L.Reduce)
def _reduce(op: L.Reduce, axis: Axis) -> str:
    return str(op.fn)


@role_rule(L.Softmax, L.L2Norm)
def _normaliser(op: Op, axis: Axis) -> str:
    return "normalise"


@role_rule(
    L.Scale,
    L.Embedding,
    L.Constant,
    L.Learned,
    L.Parameter,
    L.CausalMask,
    L.Unary,
    L.Activation,
    L.Binary,
    L.Scalar,
    L.Dropout,
    L.Cast,
)
def _mapped(op: Op, axis: Axis) -> str:
    # Scale reads only the size of its axes; masks, sources and lookups keep indices.
    return "map"


@role_rule(L.LayerNorm, L.RMSNorm)
def _whole(op: Op, axis: Axis) -> str:
    return "whole"


@role_rule(L.View)
def _view(op: L.View, axis: Axis) -> str:
    # A rename keeps indices (i of ``src`` is i of ``dst``); splits and merges reorder them.
    return "map" if is_rename(op) else "whole"


def is_rename(op: Op) -> bool:
    """A view that only gives one axis a new identity (no data reordering along it)."""
    return (
        isinstance(op, L.View)
        and len(op.in_axes) == len(op.out_axes) == 1
        and op.in_parts == op.out_parts
    )


class StreamAnalysis:
    """The accumulator of every node when ``axis`` is streamed through ``nodes``.

    ``kinds[i]`` is one of ``prologue`` (independent of the stream, runs once before it),
    ``chunk`` (runs on each chunk), ``sum``/``max``/``min``/``mean`` (accumulates across chunks),
    ``online_softmax``/``l2`` (a normalised contraction: the normaliser and its contraction
    both carry it) or ``epilogue`` (runs once on finished accumulators). A reducing ``Linear``
    adds its bias once (the accumulator starts at the bias, not once per chunk).
    """

    def __init__(self, axis: Axis, kinds: dict[int, str], states: dict[int, str]) -> None:
        self.axis, self.kinds, self.states = axis, kinds, states

    def __repr__(self) -> str:
        return f"StreamAnalysis({self.axis.ref}, {self.kinds})"


def _where(graph: Graph, i: int) -> str:
    n = graph.nodes[i]
    at = f" ({n.path})" if n.path else ""
    return f"{n.op.label}{at} [node {i}, built at {n.site or '?'}]"


def analyse_stream(
    graph: Graph, nodes: Sequence[int], axis: Axis, outputs: Iterable[int] | None = None
) -> StreamAnalysis:
    """Decide how ``axis`` streams through ``nodes`` (topological order); raise ``ScheduleError``
    naming the op that cannot run on chunks, and the fix."""
    members = set(nodes)
    state: dict[int, str] = {}
    kinds: dict[int, str] = {}
    norm_kind: dict[int, str] = {}
    ax = axis.ref

    def value_state(v: int) -> str:
        if v in state:
            return state[v]
        return "chunk" if axis in graph.values[v].axes else "const"

    for i in sorted(members):
        node = graph.nodes[i]
        r = role(node, axis)
        ins = [value_state(v) for v in node.inputs]
        where = _where(graph, i)
        if "acc" in ins and ("chunk" in ins or "norm" in ins):
            raise ScheduleError(
                f"{where} combines a finished reduction over {ax} with a chunk of {ax}: it needs "
                f"all of {ax} first. Fix: end the kernel before it, or do not stream {ax}."
            )
        pending = [norm_kind[v] for v in node.inputs if v in norm_kind]
        if "acc" in ins:
            kind, out = "epilogue", "acc"
        elif r == "whole":
            raise ScheduleError(
                f"{where} needs all of {ax} at once ({node.op.kind} over it is not streamable). "
                f"Fix: end the kernel before it, or stream another axis."
            )
        elif r == "normalise":
            kind = NORMALISER_KINDS[type(node.op)]
            out = "norm"
        elif r in REDUCING:
            if pending:
                if r != "sum" or not isinstance(node.op, L.Einsum | L.Linear):
                    raise ScheduleError(
                        f"{where} reduces a normalised chunk over {ax} with {r}; only a "
                        "contraction completes a normalised contraction. Fix: contract the "
                        f"normaliser's output over {ax} (attention), or end the kernel before it."
                    )
                kind = pending[0]
            else:
                kind = r
            out = "acc"
        elif pending:
            homogeneous = HOMOGENEOUS.get(type(node.op))
            if homogeneous is None or not homogeneous(node.op):
                raise ScheduleError(
                    f"{where} applies a non-homogeneous map to a normalised chunk over {ax}, which "
                    "does not commute with the pending normalisation. Fix: move it after the "
                    "contraction, or end the kernel after the normaliser."
                )
            kind, out = "chunk", "norm"
        elif "chunk" in ins or r in ("lift", "map"):
            kind, out = "chunk", "chunk"
        else:
            kind, out = "prologue", "const"
        kinds[i] = kind
        for v in node.outputs:
            state[v] = out
            if out == "norm":
                norm_kind[v] = pending[0] if pending else kind
    leaving = (
        set(outputs)
        if outputs is not None
        else {
            v
            for i in members
            for v in graph.nodes[i].outputs
            if v in graph.outputs or any(c not in members for c in graph.consumers[v])
        }
    )
    for v in leaving:
        if state.get(v) == "norm":
            i = graph.producers[v]
            raise ScheduleError(
                f"{_where(graph, i)}: the normaliser over {ax} needs all of {ax} before its output "
                f"can be written (value {v} leaves the kernel). Fix: stream {ax} into a "
                "contraction over it (attention) to fuse, or keep the normaliser whole."
            )
        for c in graph.consumers[v]:
            if c not in members and state.get(v) == "norm":
                raise ScheduleError(f"value {v} is a pending normalised chunk read outside")
    return StreamAnalysis(axis, kinds, state)
