"""Which kernels a C-like target generates: ``ncd.fuse`` (then the splits below), or a small
local planner (``fuse="local"``), or one kernel per op. Shared by ncd-opencl and ncd-cuda.

The local planner (documented in docs/opencl.md) keeps a value in memory when it is a graph
output, has several consumers, or sits between two heavy ops (contraction, reduction,
normaliser) -- except a normaliser whose output only feeds a contraction over its axis, which
is streamed (flash). Everything else is inlined into its single consumer: elementwise chains,
views, epilogues (bias, activation, residual add) of contractions and normalisers.
"""

from __future__ import annotations

import math
from collections.abc import Collection, Sequence

import attrs

from ncd.axis import Axis
from ncd.codegen.program import choose_layouts
from ncd.errors import ScheduleError
from ncd.graph import Graph, Node
from ncd.kernel import FusionPlan, Kernel, Partition, kernel_io, unfused
from ncd.primitives import library as L

__all__ = [
    "LinearForm",
    "choose_layouts",
    "flat_tile",
    "linear_form",
    "local_plan",
    "outer_product",
    "plan_for",
    "spread_tile",
]

HEAVY = frozenset({"contraction", "reduction", "normaliser", "other"})
STREAMABLE = (L.Softmax, L.L2Norm)


def _heavy(node: Node) -> bool:
    return node.op.category in HEAVY


def _streamed(graph: Graph, i: int) -> bool:
    """Node ``i`` is a streamable normaliser whose only consumer contracts its axis."""
    node = graph.nodes[i]
    if not isinstance(node.op, STREAMABLE):
        return False
    cs = graph.consumers[node.outputs[0]]
    if len(cs) != 1 or node.outputs[0] in graph.outputs:
        return False
    c = graph.nodes[cs[0]].op
    return isinstance(c, L.Einsum) and node.op.axis in c.contracted


def _feeds_stream(graph: Graph, v: int) -> bool:
    """Value ``v`` reaches a streamed normaliser through single-consumer elementwise ops."""
    while True:
        cs = graph.consumers[v]
        if len(cs) != 1 or v in graph.outputs:
            return False
        node = graph.nodes[cs[0]]
        if _streamed(graph, cs[0]):
            return True
        if node.op.category not in ("elementwise", "view"):
            return False
        v = node.outputs[0]


def _inline(graph: Graph, i: int, v: int) -> bool:
    node = graph.nodes[i]
    cs = graph.consumers[v]
    if v in graph.outputs or len(cs) != 1:
        return False
    consumer = graph.nodes[cs[0]]
    if _streamed(graph, i) or _feeds_stream(graph, v):
        return True
    if node.op.category in ("view", "source"):
        return True
    if consumer.op.category == "view":
        return not _heavy(node)  # a heavy result seen through a view is read from memory
    if consumer.op.category == "elementwise":
        return True  # an epilogue: computed once per element where it is consumed
    # the consumer reads every element many times (a contraction) or several times (a norm)
    return not _heavy(node) and consumer.op.category != "contraction"


def _local_groups(graph: Graph) -> list[list[int]]:
    """The local planner's kernels as node lists: each value kept in memory roots one."""
    owner: dict[int, int] = {}  # node -> root node
    for i in reversed(range(len(graph.nodes))):
        node = graph.nodes[i]
        v = node.outputs[0]
        if len(node.outputs) == 1 and _inline(graph, i, v):
            owner[i] = owner[graph.consumers[v][0]]
        else:
            owner[i] = i
    groups: dict[int, list[int]] = {}
    for i in range(len(graph.nodes)):
        groups.setdefault(owner[i], []).append(i)
    return [groups[root] for root in sorted(groups)]


def _local_kernel(graph: Graph, nodes: list[int]) -> Kernel:
    ins, outs = kernel_io(graph, nodes)
    return Kernel(
        graph, nodes, ins, outs, _partitions(graph, nodes, outs), _name(graph, nodes, max(nodes))
    )


def local_plan(graph: Graph) -> FusionPlan:
    """Kernels rooted at every value kept in memory; each holds what it inlines."""
    return FusionPlan(graph, [_local_kernel(graph, nodes) for nodes in _local_groups(graph)], ())


def _partitions(graph: Graph, nodes: list[int], outs: tuple[int, ...]) -> list[Partition]:
    streamed: list[Axis] = [
        graph.nodes[i].op.axis  # type: ignore[attr-defined]
        for i in nodes
        if _streamed(graph, i)
    ]
    parts = [Partition(a, "stream") for a in streamed]
    serial = set(streamed)
    for i in nodes:
        if graph.nodes[i].op.category == "normaliser":
            serial.update(a for g in graph.nodes[i].core_in for a in g)
    last = graph.values[outs[-1]].axes if outs else ()
    parts += [Partition(a, "group", 1, 1) for a in last if a not in serial]
    return parts


def _name(graph: Graph, nodes: list[int], root: int) -> str:
    kinds = [graph.nodes[i].op.kind for i in nodes if graph.nodes[i].op.category != "view"]
    body = "_".join(dict.fromkeys(kinds)) or graph.nodes[root].op.kind
    return f"k{root}_{body}"[:40]


def plan_for(graph: Graph, fuse: bool | str = True) -> FusionPlan:
    """``fuse=False``: one kernel per node; ``"local"``: this module's planner; ``True``:
    ``ncd.fuse``, its plain-sum streams and sibling maps split (each piece a matmul)."""
    if fuse is False:
        return unfused(graph)
    if fuse is True:
        from ncd.fusion import fuse as fuser

        return split_siblings(split_sum_streams(fuser(graph), graph))
    return local_plan(graph)


def split_sum_streams(plan: FusionPlan, graph: Graph) -> FusionPlan:
    """Replace kernels that stream a plain sum (the MLP streamed over ``d_ff``) by the local
    planner's kernels for the same nodes: each is then a matmul with its epilogue. On PoCL's CPU
    device a work-item carrying a whole output row of accumulators ran 8x slower than one
    work-item per output element (measured on the MLP, docs/opencl.md); on a GPU such a row is
    a register file's worth per thread and no tensor-core tile. Normalised contractions
    (attention) keep their stream, and so does a stream reading no learned map (attention's
    backward: its chunks are recomputed scores, which a split would write, seq x seq, to
    memory)."""
    groups: list[list[int]] | None = None
    kernels: list[Kernel] = []
    for k in plan.kernels:
        kinds = set(k.accumulators().values()) if k.streamed else set()
        learned = any(isinstance(graph.nodes[i].op, L.Linear | L.Learned) for i in k.nodes)
        if not k.streamed or kinds & {"online_softmax", "l2"} or not learned:
            kernels.append(k)
            continue
        groups = _local_groups(graph) if groups is None else groups
        members = set(k.nodes)
        parts = [nodes for nodes in groups if set(nodes) <= members]
        if sorted(i for nodes in parts for i in nodes) != sorted(members):
            kernels.append(k)
            continue
        kernels.extend(_local_kernel(graph, nodes) for nodes in parts)
    return FusionPlan(graph, kernels, plan.boundaries)


@attrs.frozen
class LinearForm:
    """A learned map as a matmul template renders it: ``y[m.., n..] = sum_k x[m.., k..]
    w[n.., k..]`` (plus ``bias[n..]``): a ``Linear``, or an ``Einsum`` of an activation with a
    weight laid out ``(out.., in..)``, a parameter source (``nn.lstm``'s input matrices under
    torch's names) or a value the kernel reads (a recurrent matrix sliced per gate).
    ``weight``: the node holding the parameter and its name, or the value's id; ``bias``:
    likewise for a ``Linear``'s bias."""

    node: Node
    x: int
    in_axes: tuple[Axis, ...]
    out_axes: tuple[Axis, ...]
    weight: tuple[Node, str] | int
    bias: tuple[Node, str] | None

    @property
    def loop(self) -> tuple[Axis, ...]:
        return tuple(self.node.loop)

    @property
    def source(self) -> Node | None:
        """The parameter source the weight is read from (the template renders it itself)."""
        return None if isinstance(self.weight, int) else self.weight[0]


def _activation_side(op: object) -> int | None:
    """Which input of a two-input ``Einsum`` is the activation ``x[.., k..]`` when the other
    is a weight ``w[n.., k..]`` and the result ``[.. n..]`` (x @ W.T, or W @ h as a recurrent
    cell writes it), else ``None``."""
    if not isinstance(op, L.Einsum) or len(op.inputs) != 2:
        return None
    out = tuple(op.output)
    for xi in (0, 1):
        x_core, w_core = op.inputs[xi], op.inputs[1 - xi]
        if x_core and tuple(w_core) == (*out, *x_core) and not set(out) & set(x_core):
            return xi
    return None


def linear_form(g: Graph, heavy: Sequence[Node], made: Collection[int]) -> LinearForm | None:
    """The learned map of a kernel whose heavy nodes (all but elementwise ops and free
    renames) are ``heavy`` and which makes the values ``made``, else ``None``: one ``Linear``;
    or one two-input ``Einsum`` contracting the trailing axes of its first input with a weight
    laid out ``(out.., in..)``: a ``Parameter``/``Learned`` source of the kernel read by
    nothing else, or a value made outside it; other heavy nodes may only be parameter or
    constant sources (biases the epilogue adds)."""
    maps = [n for n in heavy if n.op.category != "source"]
    if len(maps) != 1:
        return None
    (node,) = maps
    op = node.op
    if isinstance(op, L.Linear):
        bias = (node, "bias") if op.bias else None
        return LinearForm(node, node.inputs[0], op.in_axes, op.out_axes, (node, "weight"), bias)
    xi = _activation_side(op) if len(node.inputs) == 2 else None
    if xi is None or not isinstance(op, L.Einsum):
        return None
    x_core, w_core, out = op.inputs[xi], op.inputs[1 - xi], tuple(op.output)
    x, w = node.inputs[xi], node.inputs[1 - xi]
    if w not in made:  # a value the kernel reads: in the (out.., in..) order it arrives in
        if tuple(g.values[w].axes) != tuple(w_core):
            return None
        return LinearForm(node, x, tuple(x_core), out, w, None)
    p = g.producers.get(w)
    src = g.nodes[p] if p is not None else None
    if src is None or not isinstance(src.op, L.Learned) or src.loop or src not in heavy:
        return None
    readers = g.consumers[w]
    if len(readers) != 1 or g.nodes[readers[0]] is not node:
        return None
    (param,) = src.op.params()
    if tuple(param.axes) != tuple(w_core):
        return None
    return LinearForm(node, x, tuple(x_core), out, (src, param.name), None)


def outer_product(node: Node, made: Collection[int]) -> bool:
    """A two-input einsum contracting values both read from memory, none of ``made`` (a
    weight's gradient): what ncd-opencl's broadcast GEMM renders."""
    op = node.op
    return (
        isinstance(op, L.Einsum)
        and len(node.inputs) == 2
        and bool(op.contracted)
        and not any(v in made for v in node.inputs)
    )


def split_siblings(plan: FusionPlan) -> FusionPlan:
    """One kernel per learned map or contraction of two values read from memory in
    sibling-fused kernels (the q/k/v projections read the same input; so do the gradients of
    their weights): each piece then fits a matmul template; a node goes with the first
    contraction it depends on inside the kernel."""
    g = plan.graph
    out: list[Kernel] = []
    for k in plan.kernels:
        made = {v: i for i in k.nodes for v in g.nodes[i].outputs}
        roots = [
            i
            for i in k.nodes
            if isinstance(g.nodes[i].op, L.Linear)
            or _activation_side(g.nodes[i].op) is not None
            or outer_product(g.nodes[i], made)
        ]
        if len(roots) < 2 or k.streamed:
            out.append(k)
            continue
        owner: dict[int, int] = {}
        for i in k.nodes:
            deps = [owner[made[v]] for v in g.nodes[i].inputs if v in made]
            owner[i] = i if i in roots else (deps[0] if deps else roots[0])
        if any(
            len({owner[made[v]] for v in g.nodes[i].inputs if v in made} | {owner[i]}) > 1
            for i in k.nodes
        ):
            out.append(k)  # a node joins two maps: keep the planner's kernel
            continue
        for r in roots:
            nodes = [i for i in k.nodes if owner[i] == r]
            ins, outs = kernel_io(g, nodes)
            parts = [p for p in k.partitions if p.axis in Kernel(g, nodes, ins, outs).axes()]
            out.append(Kernel(g, nodes, ins, outs, parts, f"{k.name}_{g.nodes[r].op.kind}{r}"))
    return FusionPlan(g, out, plan.boundaries)


def spread_tile(g: Graph, axes: Sequence[Axis], flat: int, level: int) -> list[Partition]:
    """A tile of ``flat`` consecutive indices of ``axes`` flattened row-major, as one group
    partition per axis at ``level`` (inner axes first; a tile past the axes' product stays as
    the outermost's tile, the template masks the tail): how a target records a template's
    tile over a flattened run of axes (a matmul's rows or columns) as choices."""
    out = []
    rest = flat
    for n, a in enumerate(reversed(axes)):
        size = g.size(a)
        if size is None:
            raise ScheduleError(f"axis {a.describe()} has no size; bind it before planning tiles")
        last = n == len(axes) - 1
        t = rest if last else min(rest, size)
        out.append(Partition(a, "group", t, level))
        rest = -(-rest // size) if t == size else 1
    return out[::-1]


def flat_tile(
    kernel: Kernel, axes: Sequence[Axis], level: int, default: int | None = None
) -> int | None:
    """The chosen tile of ``axes`` flattened row-major at ``level`` (``None``: none chosen;
    ``default`` when the choices are ``default`` spread by ``spread_tile``, which a run that is no
    product of per-axis tiles, 16 indices of (1, 7), only approximates); ``ScheduleError``
    when the per-axis tiles are no run of consecutive flat indices."""
    g = kernel.graph
    tiles = [kernel.chosen(a, level) for a in axes]
    if all(t is None for t in tiles):
        return None
    if default is not None and [p.tile for p in spread_tile(g, axes, default, level)] == tiles:
        return default
    got = [t or _bound(g, a) for t, a in zip(tiles, axes, strict=True)]
    for i, (t, a) in enumerate(zip(got, axes, strict=True)):
        inner = list(zip(got[i + 1 :], axes[i + 1 :], strict=True))
        if t > 1 and any(u != _bound(g, b) for u, b in inner):
            shown = ", ".join(f"{b.describe()}: {u}" for u, b in zip(got, axes, strict=True))
            raise ScheduleError(
                f"kernel {kernel.name}: the matmul tiles the flattened index of "
                f"({', '.join(b.ref for b in axes)}) at level {level}; the tiles {{{shown}}} are "
                f"no run of consecutive indices ({a.ref} is cut while an inner axis is cut "
                "too). Fix: tile only the innermost axis, or keep every axis inside a cut one "
                "whole."
            )
    return math.prod(got)


def _bound(g: Graph, a: Axis) -> int:
    n = g.size(a)
    if n is None:
        raise ScheduleError(f"axis {a.describe()} has no size; bind it before planning tiles")
    return n
