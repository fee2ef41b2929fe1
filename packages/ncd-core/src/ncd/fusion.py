"""Fusion planning: ``ncd.fuse(model)`` groups graph nodes into kernels and says why it stops.

The planner walks ``graph.nodes`` once, in topological order, and tries to merge each *unit*
(a node; a normaliser glued to the contraction that completes it, with any reduction of its
scores over the same axis (a backward's row statistic); source nodes glued to their first
reader; a sliding window glued to its one reader, which reads it in place) into the kernels
producing its inputs (all of them at once when they are independent and unstreamed: an
elementwise join of two chains), else into the kernel producing one input, else into a kernel
reading the same input (sibling fusion: the q/k/v projections). A merge is kept when

1. every value crossing it is read only inside the merged kernel (else it must be written out),
   or, for an elementwise unit or a join into unstreamed kernels, also by nodes not planned yet
   (which may join next);
2. every axis some op reduces on a value produced inside the kernel is either left whole or is
   the one streamed axis, and streaming it passes ``ncd.streaming.analyse_stream``;
3. no parallelism is lost: the merged kernel can still group every axis the kernel grouped
   (bar the one now streamed) and, without a stream, every axis the unit grouped except those
   the kernel already reduces (or, for an elementwise unit, normalises) whole.

Axes a kernel can group are those every node lifts or maps index for index (renames carry them
to a new identity). The first reason a merge fails is kept as the boundary's reason.
"""

from __future__ import annotations

import heapq
from collections.abc import Sequence
from typing import Any

from ncd.axis import Axis
from ncd.errors import ScheduleError
from ncd.graph import Graph
from ncd.kernel import Boundary, FusionPlan, Kernel, Partition, kernel_io
from ncd.primitives import library as L
from ncd.primitives.window import Window
from ncd.streaming import HOMOGENEOUS, NORMALISER_KINDS, REDUCING, analyse_stream, is_rename, role

__all__ = ["axis_labels", "fuse", "groupable_axes", "tile_symbol"]


def axis_labels(graph: Graph) -> dict[str, str]:
    """axis uid -> its config label (``seq``, ``d_model``...); derived axes keep their name."""
    config = graph.config()
    out = {a.uid: a.name for a in graph.axes}
    for sv in (*config.free, *config.bound):
        for a in sv.axes:
            out[a.uid] = sv.label
    return out


def tile_symbol(name: str) -> str:
    """The symbolic tile name the planner gives an axis named ``name``."""
    return f"t_{name}"


class _Reject(Exception):
    pass


def _units(graph: Graph) -> list[list[int]]:
    """Nodes in topological order, a normaliser glued to the contraction completing it (through
    homogeneous maps), each source node glued to its first reader. A unit is emitted at the
    position of its last node, so all its outside inputs exist by then."""
    glued: dict[int, int] = {}  # node -> last node of its unit
    for i, node in enumerate(graph.nodes):
        if type(node.op) not in NORMALISER_KINDS:
            continue
        axis = node.op.axes()[0]
        chain, j = [i], i
        while True:
            (v,) = graph.nodes[j].outputs
            cons = graph.consumers[v]
            if len(cons) != 1 or v in graph.outputs:
                break
            j = cons[0]
            nxt = graph.nodes[j]
            if role(nxt, axis) == "sum":
                for k in (*chain, *_row_statistic(graph, node.inputs[0], axis, i)):
                    glued[k] = j
                break
            hom = HOMOGENEOUS.get(type(nxt.op))
            if hom is None or not hom(nxt.op):
                break
            chain.append(j)
    for i in reversed(range(len(graph.nodes))):
        # a sliding window is an index map read in place by its one reader (no im2col array)
        (v, *more) = graph.nodes[i].outputs
        readers = graph.consumers[v]
        lone = len(readers) == 1 and not more and v not in graph.outputs
        if isinstance(graph.nodes[i].op, Window) and lone:
            glued[i] = glued.get(readers[0], readers[0])
    for i, node in enumerate(graph.nodes):
        if node.op.category == "source" and not node.inputs:
            readers = [c for v in node.outputs for c in graph.consumers[v]]
            if readers:
                first = min(readers)
                glued[i] = glued.get(first, first)
    units: dict[int, list[int]] = {}
    for i in range(len(graph.nodes)):
        units.setdefault(glued.get(i, i), []).append(i)
    return [sorted(units[k]) for k in sorted(units)]


def _row_statistic(graph: Graph, s: int, axis: Axis, normaliser: int) -> list[int]:
    """Nodes reducing the normaliser's scores ``s`` over its axis besides it, through
    single-reader elementwise maps (the row statistic a FlashAttention backward keeps:
    ``logsumexp``, or the sum of squares of L2): they stream in the same kernel."""
    out: list[int] = []
    for r in graph.consumers[s]:
        chain, j = [], r
        while j != normaliser:
            node = graph.nodes[j]
            chain.append(j)
            if isinstance(node.op, L.Reduce) and tuple(node.op.axes_) == (axis,):
                out.extend(chain)
                break
            (v, *more) = node.outputs
            if node.op.category != "elementwise" or more or len(graph.consumers[v]) != 1:
                break
            j = graph.consumers[v][0]
    return out


class _Aliases:
    """Union of axes joined by renames inside a kernel (a grouped axis keeps its tiles)."""

    def __init__(self, graph: Graph, nodes: Sequence[int]) -> None:
        self.parent: dict[Axis, Axis] = {}
        for i in nodes:
            op = graph.nodes[i].op
            if is_rename(op):
                src, dst = self.root(op.in_axes[0]), self.root(op.out_axes[0])  # type: ignore[attr-defined]
                if src != dst:
                    self.parent[dst] = src

    def root(self, a: Axis) -> Axis:
        while a in self.parent:
            a = self.parent[a]
        return a


def _axes(graph: Graph, nodes: Sequence[int]) -> list[Axis]:
    seen: dict[Axis, None] = {}
    for i in nodes:
        n = graph.nodes[i]
        for v in (*n.inputs, *n.outputs):
            for a in graph.values[v].axes:
                seen.setdefault(a)
    return list(seen)


def _grid(graph: Graph, nodes: Sequence[int], stream: Axis | None) -> list[Axis]:
    """Alias roots every (non-source) node lifts or maps, touching one member only."""
    alias = _Aliases(graph, nodes)
    real = [i for i in nodes if graph.nodes[i].op.category != "source"] or list(nodes)
    roots: dict[Axis, None] = {}
    for a in _axes(graph, nodes):
        roots.setdefault(alias.root(a))
    members: dict[Axis, list[Axis]] = {}
    for a in _axes(graph, nodes):
        members.setdefault(alias.root(a), []).append(a)
    out = []
    for r in roots:
        if stream is not None and alias.root(stream) == r:
            continue
        ok = True
        for i in real:
            node = graph.nodes[i]
            touched = [(a, role(node, a)) for a in members[r]]
            touched = [(a, x) for a, x in touched if x != "absent"]
            if not touched and isinstance(node.op, Window):
                continue  # an index map: evaluated again per instance, at no cost
            if is_rename(node.op) and {a for a, _ in touched} <= set(node.op.axes()):
                touched = touched[:1]  # the rename itself carries the class to a new axis
            if len(touched) != 1 or touched[0][1] not in ("lift", "map"):
                ok = False
                break
        if ok:
            out.append(r)
    return out


def groupable_axes(graph: Graph, nodes: Sequence[int], stream: Axis | None = None) -> list[Axis]:
    """Axes (alias roots) a kernel of ``nodes`` can group at level 0: every node lifts or maps
    them index for index, and ``stream`` is not one of them."""
    return _grid(graph, nodes, stream)


def _internal_reduced(graph: Graph, nodes: Sequence[int]) -> list[Axis]:
    """Axes some node reduces, normalises or needs whole on a value produced inside."""
    # A rename of a value read from memory relabels it: its output is no computed value.
    produced: set[int] = set()
    for i in nodes:
        n = graph.nodes[i]
        if not is_rename(n.op) or n.inputs[0] in produced:
            produced.update(n.outputs)
    found: dict[Axis, None] = {}
    for i in nodes:
        n = graph.nodes[i]
        for v, core in zip(n.inputs, n.core_in, strict=True):
            if v in produced:
                for a in core:
                    if role(n, a) in REDUCING or role(n, a) in ("normalise", "whole"):
                        found.setdefault(a)
    return list(found)


class _IO:
    """``kernel_io`` of node sets, each set worked out once: a merge tried and kept, and the
    kernel finally built from it, share one answer (so do the sibling tests of every unit)."""

    def __init__(self, graph: Graph) -> None:
        self.graph = graph
        self.known: dict[tuple[int, ...], tuple[tuple[int, ...], tuple[int, ...]]] = {}

    def __call__(self, nodes: Sequence[int]) -> tuple[tuple[int, ...], tuple[int, ...]]:
        key = tuple(sorted(nodes))
        hit = self.known.get(key)
        if hit is None:
            hit = self.known[key] = kernel_io(self.graph, key)
        return hit


def _schedule(
    graph: Graph,
    nodes: list[int],
    old: tuple[Axis | None, list[Axis]] | None,
    unit_grid: list[Axis] | None,
    what: str,
    unit: Sequence[int] | None = None,
    io: _IO | None = None,
) -> tuple[Axis | None, list[Axis]]:
    """(streamed axis, grid) of a merged node set, or ``_Reject`` with the reason."""
    old_stream, old_grid = old if old is not None else (None, [])
    onto: dict[Axis, set[Axis]] = {}
    for i in nodes:
        op = graph.nodes[i].op
        if is_rename(op):
            onto.setdefault(op.out_axes[0], set()).add(op.in_axes[0])  # type: ignore[attr-defined]
    if any(len(srcs) > 1 for srcs in onto.values()):
        # a kernel's renames map each new axis to one source (``Kernel.aliases``): renames of
        # two axes onto one (an LSTM's four gates each renamed onto ``hidden``) stay apart
        raise _Reject(f"fusing {what} would rename two axes onto one in one kernel")
    reduced = _internal_reduced(graph, nodes)
    options: list[Axis | None] = [old_stream] if old_stream is not None else [None, *reduced]
    # The unit may give up grouping an axis only when the kernel reduces it (the stream then
    # carries it, as attention's output over d or the MLP's over d_model), or, for an
    # elementwise unit, normalises it or needs it whole: each instance already walks that
    # axis whole and the unit maps each element alone (a layernorm's activation).
    unit_set = set(unit or ())
    old_nodes = [i for i in nodes if i not in unit_set]
    elementwise = bool(unit_set) and all(
        graph.nodes[i].op.category == "elementwise" for i in unit_set
    )
    given_up = ("normalise", "whole", *REDUCING) if elementwise else REDUCING
    reduced_by_old = {
        a for i in old_nodes for a in _axes(graph, [i]) if role(graph.nodes[i], a) in given_up
    }
    first_reason = ""
    for stream in options:
        try:
            if stream is not None:  # the values leaving the set matter only to a stream
                analyse_stream(graph, nodes, stream, (io or _IO(graph))(nodes)[1])
        except ScheduleError as e:
            first_reason = first_reason or str(e)
            continue
        grid = _grid(graph, nodes, stream)
        alias = _Aliases(graph, nodes)
        have = {alias.root(a) for a in grid}
        keep_unit = [a for a in unit_grid or () if a not in reduced_by_old]
        keep_old = list(old_grid)
        if stream is not None:
            keep_unit = [a for a in keep_unit if alias.root(a) != alias.root(stream)]
            if old_stream is None:  # the merge starts the stream: its axis stops being grouped
                keep_old = [a for a in keep_old if alias.root(a) != alias.root(stream)]
            # else an axis grouped beside the stream that a rename of the unit ties to the
            # stream's axis (dK renamed from the keys back to the queries) would be lost
        keep = [*keep_old, *keep_unit]
        lost = [a for a in dict.fromkeys(keep) if alias.root(a) not in have]
        if lost:
            first_reason = first_reason or (
                f"fusing {what} would serialise {', '.join(a.ref for a in lost)}: each instance "
                "would need all of it"
            )
            continue
        return stream, grid
    raise _Reject(first_reason or f"fusing {what} needs more than one streamed axis")


#: ``ncd.fuse(objective=)``: ``None`` keeps the merge rules' plan; ``"time"`` asks the cost model
OBJECTIVES = (None, "time")

#: the boundary reason of a chain of contractions the cost model priced apart
_PRICED_APART = "objective='time': the cost model prices these contractions apart as cheaper"


def fuse(
    model: Any,
    *,
    tiles: dict[Axis | str, int] | None = None,
    objective: str | None = None,
    machine: Any = "h100",
) -> FusionPlan:
    """Plan kernels for ``model`` (a term or a graph); see the module docstring for the rules.

    Partitions carry symbolic tiles ``t_<label>`` unless ``tiles`` gives ints (by axis, label or
    tile name). ``objective="time"``: where the rules chain one contraction into another (the
    fused MLP: legal, but not obviously better), both plans are priced on ``machine`` by the
    installed cost model (ncd-perf) and the cheaper is returned; its ``priced`` lists both
    plans' times, the chosen first."""
    if objective not in OBJECTIVES:
        raise ScheduleError(
            f"ncd.fuse(objective={objective!r}): unknown objective. Fix: objective='time' "
            "(ask the cost model) or leave it out (the merge rules alone)."
        )
    if objective == "time":
        return _cheapest(model, tiles, machine)
    return _fuse(model, tiles, chain=True)


def _cheapest(model: Any, tiles: dict[Axis | str, int] | None, machine: Any) -> FusionPlan:
    import attrs

    from ncd.plugins import registry

    chained = _fuse(model, tiles, chain=True)
    apart = _fuse(model, tiles, chain=False)
    if len(apart.kernels) == len(chained.kernels):
        return chained  # no contraction chained into another: nothing to ask
    models = registry().cost_models
    if not models:
        raise ScheduleError(
            "ncd.fuse(objective='time') needs a cost model and none is installed. Fix: "
            "install ncd-perf, or leave objective out."
        )
    priced = []
    for plan, what in ((chained, "contractions chained"), (apart, "contractions apart")):
        time = (
            models.get("perf", next(iter(models.values())))
            .cost(plan.graph, machine, plan=plan)
            .time
        )
        if time is None:
            raise ScheduleError(
                "ncd.fuse(objective='time'): the plan has no numeric price (free sizes). "
                "Fix: bind every size first (model.bind(...))."
            )
        priced.append((plan, what, float(time)))
    priced.sort(key=lambda p: p[2])
    best = priced[0][0]
    return attrs.evolve(best, priced=tuple((what, t) for _, what, t in priced))


def _fuse(model: Any, tiles: dict[Axis | str, int] | None, chain: bool) -> FusionPlan:
    """The merge rules' plan; ``chain=False`` also refuses to merge a contraction into a
    kernel that already contracts (``fuse(objective="time")``'s alternative)."""
    from ncd.graph import as_graph

    graph = as_graph(model, "ncd.fuse")
    io = _IO(graph)
    kernels: list[list[int]] = []
    sched: list[tuple[Axis | None, list[Axis]]] = []
    deps: list[set[int]] = []
    owner: dict[int, int] = {}
    reasons: dict[int, str] = {}

    def producer_kernels(unit: list[int]) -> list[int]:
        inside = set(unit)
        ks = [
            owner[graph.producers[v]]
            for i in unit
            for v in graph.nodes[i].inputs
            if v in graph.producers and graph.producers[v] not in inside
        ]
        return list(dict.fromkeys(ks))

    def elementwise_unit(unit: list[int]) -> bool:
        return all(graph.nodes[i].op.category == "elementwise" for i in unit)

    def contracts(nodes: list[int]) -> bool:
        return any(graph.nodes[i].op.category == "contraction" for i in nodes)

    def try_merge(k: int, unit: list[int], vertical: bool) -> bool:
        if not chain and vertical and contracts(kernels[k]) and contracts(unit):
            for i in unit:
                for v in graph.nodes[i].inputs:
                    if owner.get(graph.producers.get(v, -1)) == k:
                        reasons.setdefault(v, _PRICED_APART)
            return False
        merged = sorted({*kernels[k], *unit})
        members = set(merged)
        what = " + ".join(graph.nodes[i].op.label for i in unit)
        crossing = [
            v
            for i in unit
            for v in graph.nodes[i].inputs
            if v in graph.producers and owner.get(graph.producers[v]) == k
        ]
        for j in producer_kernels(unit):
            if j != k and (k in deps[j]):
                return False  # merging would put k both before and after j
        # an elementwise unit may read a value of an unstreamed kernel that nodes not planned
        # yet read too (they may join the kernel next: L2's backward, P * D before P's dV)
        waits = vertical and sched[k][0] is None and elementwise_unit(unit)
        try:
            for v in crossing:
                others = [
                    c
                    for c in graph.consumers[v]
                    if c not in members and not (waits and c not in owner)
                ]
                if others or v in graph.outputs:
                    readers = ", ".join(graph.nodes[c].op.label for c in graph.consumers[v])
                    raise _Reject(
                        f"value {v} {graph.values[v]} is read by {readers}"
                        f"{' and is a model output' if v in graph.outputs else ''}: "
                        "it is written to memory once"
                    )
            unit_grid = _grid(graph, unit, None)
            result = _schedule(graph, merged, sched[k], unit_grid, what, unit, io)
        except _Reject as e:
            for v in crossing:
                reasons.setdefault(v, str(e))
            return False
        if not vertical and result[0] is not None:
            return False
        kernels[k] = merged
        sched[k] = result
        for j in producer_kernels(unit):
            if j != k:
                deps[k] |= deps[j] | {j}
        for m in range(len(kernels)):
            if k in deps[m]:
                deps[m] |= deps[k]
        for i in unit:
            owner[i] = k
        return True

    def try_join(ks: list[int], unit: list[int]) -> bool:
        """Merge ``unit`` with several producer kernels at once (an elementwise join of two
        independent chains: a backward's recomputed probabilities times its ``dP - D``). A
        value crossing it may also feed nodes not planned yet (the same probabilities times
        ``dO``, dV): they may join the kernel next, else the value is written."""
        if any(a in deps[b] for a in ks for b in ks) or any(sched[k][0] is not None for k in ks):
            return False
        merged = sorted({i for k in ks for i in kernels[k]} | set(unit))
        members = set(merged)
        for i in unit:
            for v in graph.nodes[i].inputs:
                if owner.get(graph.producers.get(v, -1)) in ks and (
                    v in graph.outputs
                    or any(c not in members and c in owner for c in graph.consumers[v])
                ):
                    return False
        what = " + ".join(graph.nodes[i].op.label for i in unit)
        old_grid = [a for k in ks for a in sched[k][1]]
        try:
            result = _schedule(
                graph, merged, (None, old_grid), _grid(graph, unit, None), what, unit, io
            )
        except _Reject:
            return False
        if result[0] is not None:
            return False
        k0, rest = ks[0], set(ks[1:])
        kernels[k0], sched[k0] = merged, result
        for j in rest:
            deps[k0] |= deps[j]
            kernels[j], deps[j] = [], set()  # emptied: never launched
        for m in range(len(kernels)):
            if k0 in deps[m] or deps[m] & rest:
                deps[m] = (deps[m] - rest) | {k0} | deps[k0]
        for i in merged:
            owner[i] = k0
        return True

    for unit in _units(graph):
        made_by = producer_kernels(unit)
        done = len(made_by) > 1 and try_join(made_by, unit)
        done = done or any(try_merge(k, unit, True) for k in reversed(made_by))
        if not done:
            # kernels reading one of the unit's inputs from outside themselves (found through
            # the input's consumers, not by scanning every kernel: linear in depth)
            producers = set(producer_kernels(unit))
            reads = {v for i in unit for v in graph.nodes[i].inputs}
            siblings = sorted(
                {
                    owner[c]
                    for v in reads
                    for c in graph.consumers[v]
                    if c in owner
                    and owner[c] not in producers
                    and owner.get(graph.producers.get(v, -1)) != owner[c]
                }
            )
            done = any(try_merge(k, unit, False) for k in reversed(siblings))
        if not done:
            try:
                result = _schedule(graph, unit, None, None, "", None, io)
            except _Reject:
                result = (None, _grid(graph, unit, None))
            kernels.append(list(unit))
            sched.append(result)
            deps.append(
                {j for j in producer_kernels(unit)}
                | {d for j in producer_kernels(unit) for d in deps[j]}
            )
            for i in unit:
                owner[i] = len(kernels) - 1
    return _assemble(graph, kernels, sched, deps, reasons, tiles or {}, io)


def _assemble(
    graph: Graph,
    kernels: list[list[int]],
    sched: list[tuple[Axis | None, list[Axis]]],
    deps: list[set[int]],
    reasons: dict[int, str],
    tiles: dict[Axis | str, int],
    io: _IO,
) -> FusionPlan:
    """Order kernels topologically, attach partitions and the boundary reasons."""
    # Kahn's order, the ready kernel with the earliest node first (a heap: linear in depth)
    order: list[int] = []
    waiting = [len(deps[k]) for k in range(len(kernels))]
    after: dict[int, list[int]] = {}
    for k, ds in enumerate(deps):
        for j in ds:
            after.setdefault(j, []).append(k)
    ready = [(min(kernels[k] or [-1]), k) for k in range(len(kernels)) if not waiting[k]]
    heapq.heapify(ready)
    while ready:
        _, k = heapq.heappop(ready)
        order.append(k)
        for m in after.get(k, ()):
            waiting[m] -= 1
            if not waiting[m]:
                heapq.heappush(ready, (min(kernels[m] or [-1]), m))
    if len(order) < len(kernels):  # the merge rules exclude cycles; this guards the invariant
        raise ScheduleError("fusion planner produced a cyclic kernel order (a bug)")
    # a kernel that writes nothing (values traced and never read: a scan's unused final
    # state) is never launched; its nodes belong to no kernel
    order = [k for k in order if io(kernels[k])[1]]
    labels = axis_labels(graph)

    def tile(a: Axis) -> int | str:
        # Tiles are per axis (the query and key tiles of attention differ even though both
        # axes have the size ``seq``), named after the axis.
        sym = tile_symbol(a.name)
        for key in (a, labels[a.uid], sym):
            if key in tiles:
                return tiles[key]
        return sym

    out: list[Kernel] = []
    position = {k: n for n, k in enumerate(order)}
    for k in order:
        nodes = kernels[k]
        stream, grid = sched[k]
        alias = _Aliases(graph, nodes)
        roots = set(grid)
        parts = [
            Partition(a, "group", tile(alias.root(a)))
            for a in _axes(graph, nodes)
            if alias.root(a) in roots
        ]
        if stream is not None:
            parts.append(Partition(stream, "stream", tile(stream)))
        ins, outs = io(nodes)
        body = "_".join(dict.fromkeys(graph.nodes[i].op.kind for i in nodes))[:40]
        out.append(Kernel(graph, nodes, ins, outs, parts, f"k{len(out)}_{body}"))
    owner = {i: position[k] for k in order for i in kernels[k]}
    bounds = []
    for p, kern in enumerate(out):
        for v in kern.outputs:
            readers = sorted({owner[c] for c in graph.consumers[v] if c in owner} - {p})
            if not readers:
                continue
            if len(readers) > 1 or v in graph.outputs:
                names = ", ".join(out[r].name for r in readers)
                reason = (
                    f"read by {len(readers)} kernels ({names})"
                    f"{' and a model output' if v in graph.outputs else ''}: "
                    "written to memory once"
                )
            else:
                later = [c for c in graph.consumers[v] if owner.get(c, p) != p]
                joined = (
                    f"{graph.nodes[later[0]].op.label} joined {out[owner[later[0]]].name}"
                    if later
                    else ""
                )
                reason = reasons.get(
                    v,
                    f"{joined} through another input; one kernel cannot also absorb this producer",
                )
            bounds.append(Boundary(v, p, tuple(readers), reason))
    return FusionPlan(graph, out, bounds)
