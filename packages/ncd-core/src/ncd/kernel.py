"""Kernels: a fused group of graph nodes with a partition of its axes per memory level.

This module is the contract shared by the fusion planner (``ncd.fuse``), the cost models
(ncd-perf), the code generators (ncd-opencl, ncd-cuda) and the diagrams (ncd-diagram): all of
them read the same ``Kernel`` objects.

A kernel runs the nodes ``nodes`` of ``graph``, reading ``inputs`` from and writing ``outputs``
to the memory level above it. Each ``Partition`` says how one axis is split at one level:

- ``group``: the axis is cut into independent tiles of ``tile`` indices that run in parallel
  (level 0: work-groups / thread blocks; level 1: work-items / threads), each loading its own
  inputs;
- ``stream``: the axis is walked serially in chunks of ``tile`` while an accumulator is carried
  (the online-softmax rescale for a normalised contraction, a running sum or maximum).

``tile`` is an int, a symbol name (str) for cost models, or ``None`` for the whole axis. Axes
of the kernel without a partition are handled whole by each instance (serial loops).

The contract a code generator renders (``ncd.fuse(model).kernels``):

- ``kernel.nodes`` are graph node indices in topological order; ``kernel.inputs`` the values
  read from the level above (parameters are read through ``graph.nodes[i].params()``),
  ``kernel.outputs`` the values written back.
- ``kernel.partitions``: at most one per (axis, level). Level-0 ``group`` partitions form the
  grid; level >= 1 ``group`` partitions split an instance's work among cooperating workers
  (they may share a reduction, e.g. a work-group reducing a softmax row). A ``stream``
  partition is the serial chunk loop. The planner emits symbolic tiles ``t_<label>``;
  ``kernel.with_tiles({axis or label: int})`` makes them concrete.
- ``kernel.accumulators()`` gives, for the streamed axis, each node's role in the chunk loop:
  ``prologue``, ``chunk``, ``sum``/``max``/``min``/``mean``, ``online_softmax`` / ``l2``
  (normalised contraction: set on the normaliser *and* on the contraction that completes it),
  ``epilogue`` (runs once on finished accumulators). ``kernel.aliases`` pairs a renamed axis
  with its source when a rename inside the kernel carries a grouped axis to a new identity.

Construction validates: an axis the kernel does not touch, two partitions of one axis at one
level, a stream through an op that cannot run on chunks (``ncd.streaming``), a level-0 group of
an axis some op reduces, or an int tile that does not divide its bound axis with ``tail=False``
all raise ``ncd.ScheduleError`` naming the axis, the op and the fix.

**The schedule.** ``kernel.schedule`` (a ``Schedule``) holds the facts every reader shares,
computed once when the kernel is built: inputs and outputs, the rename classes (``aliases``),
the grid (level-0 group axes, one per rename class), the streamed axis and each node's role in
its chunk loop (``accumulators``), the contracted axes, and the partition of every axis at every
level (``partition(axis, level)``; ``None`` = the whole axis). ``kernel.choices`` are partitions
a *target* (or the user, through ``ncd.plan(..., tiles=)``) chose for the kernel: they refine or
replace ``partitions`` at the same (axis, level) in the schedule, so cost models and code
generators read one set of tiles, while ``partitions`` stays the planner's (``str(kernel)``
prints those). Levels: 0 = one instance of the grid (a work-group), 1 = one worker inside it
(a work-item's register block: rows of a matmul, query rows of streamed attention); a stream
partition at level 0 is the kernel's stream, at level >= 1 the blocking of an axis an instance
walks whole (vector lanes of a row kernel), which needs no streamability. A choice's tile is an
int >= 1, an inner level's tile at most the outer level's.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Literal

import attrs

from ncd.axis import Axis
from ncd.errors import ScheduleError
from ncd.graph import Graph, Node
from ncd.walk import boundary

__all__ = ["Boundary", "FusionPlan", "Kernel", "Partition", "Schedule"]

PartitionKind = Literal["group", "stream"]


def _ints(value: Iterable[int]) -> tuple[int, ...]:
    return tuple(value)


def _partitions(value: Iterable[Partition]) -> tuple[Partition, ...]:
    return tuple(value)


def _kernels(value: Iterable[Kernel]) -> tuple[Kernel, ...]:
    return tuple(value)


def _boundaries(value: Iterable[Boundary]) -> tuple[Boundary, ...]:
    return tuple(value)


@attrs.frozen
class Partition:
    """How one axis is split at one memory level."""

    axis: Axis
    kind: PartitionKind
    tile: int | str | None = None
    level: int = 0
    tail: bool = True  # tiles need not divide the axis: instances mask the remainder

    def __str__(self) -> str:
        tile = "" if self.tile is None else f"/{self.tile}"
        return f"{self.kind}({self.axis.name}{tile}@L{self.level})"


@attrs.frozen
class Schedule:
    """The facts of one kernel that the planner, the cost models, the code generators and the
    diagrams read, computed once when the kernel is built (see the module docstring)."""

    inputs: tuple[int, ...]
    outputs: tuple[int, ...]
    axes: tuple[Axis, ...]
    #: renamed axis -> its source (renames inside the kernel)
    aliases: Mapping[Axis, Axis] = attrs.field(eq=False)
    #: level-0 group axes, one per rename class (its root), in partition order
    grid: tuple[Axis, ...]
    #: the axis of the level-0 stream partition, if any
    streamed: Axis | None
    #: each node's role in the chunk loop of ``streamed`` (``ncd.streaming.StreamAnalysis``)
    accumulators: Mapping[int, str] = attrs.field(eq=False)
    #: axes some node reduces (sum, max, min, mean)
    contracted: tuple[Axis, ...]
    #: the partitions in force: the planner's, with the kernel's choices applied
    partitions: tuple[Partition, ...]

    def root(self, a: Axis) -> Axis:
        """The source of ``a``'s rename class."""
        while a in self.aliases:
            a = self.aliases[a]
        return a

    def partition(self, axis: Axis, level: int = 0) -> Partition | None:
        """How ``axis`` is split at ``level`` (``None``: each instance takes it whole)."""
        for p in self.partitions:
            if p.axis == axis and p.level == level:
                return p
        return None

    def tile(self, axis: Axis, level: int = 0) -> int | str | None:
        p = self.partition(axis, level)
        return None if p is None else p.tile

    @property
    def levels(self) -> int:
        """How many levels carry a partition (0 for an unpartitioned kernel)."""
        return 1 + max((p.level for p in self.partitions), default=-1)

    def at(self, level: int) -> tuple[Partition, ...]:
        return tuple(p for p in self.partitions if p.level == level)


@attrs.frozen
class Kernel:
    """Nodes of one graph fused into one launch, with their partitions."""

    graph: Graph = attrs.field(repr=False, eq=False)
    nodes: tuple[int, ...] = attrs.field(converter=_ints)
    inputs: tuple[int, ...] = attrs.field(converter=_ints)
    outputs: tuple[int, ...] = attrs.field(converter=_ints)
    partitions: tuple[Partition, ...] = attrs.field(default=(), converter=_partitions)
    name: str = ""
    #: partitions a target or the user chose (see the module docstring)
    choices: tuple[Partition, ...] = attrs.field(default=(), converter=_partitions)
    schedule: Schedule = attrs.field(init=False, eq=False, repr=False)

    def __attrs_post_init__(self) -> None:
        object.__setattr__(self, "schedule", _validate(self))

    @property
    def ops(self) -> tuple[Node, ...]:
        return tuple(self.graph.nodes[i] for i in self.nodes)

    def axes(self) -> tuple[Axis, ...]:
        """Every axis the kernel's nodes touch, in first-appearance order."""
        return self.schedule.axes

    def partitions_at(self, level: int) -> tuple[Partition, ...]:
        return tuple(p for p in self.partitions if p.level == level)

    @property
    def streamed(self) -> tuple[Axis, ...]:
        return tuple(dict.fromkeys(p.axis for p in self.partitions if p.kind == "stream"))

    @property
    def grouped(self) -> tuple[Axis, ...]:
        return tuple(dict.fromkeys(p.axis for p in self.partitions if p.kind == "group"))

    def accumulators(self, axis: Axis | None = None) -> dict[int, str]:
        """Each node's role in the chunk loop of ``axis`` (default: the streamed axis); empty
        when nothing is streamed. See ``ncd.streaming.StreamAnalysis``. The streamed axis's
        roles come from the schedule (analysed once, at construction)."""
        from ncd.streaming import analyse_stream

        s = self.schedule
        if axis is None or axis == s.streamed:
            return dict(s.accumulators)
        return analyse_stream(self.graph, self.nodes, axis, self.outputs).kinds

    @property
    def aliases(self) -> dict[Axis, Axis]:
        """Renamed axis -> its source, for renames inside this kernel."""
        return dict(self.schedule.aliases)

    def tile(self, axis: Axis, level: int = 0) -> int | str | None:
        """The tile of ``axis`` at ``level`` in the schedule (choices included; ``None``: whole
        axis, no partition)."""
        return self.schedule.tile(axis, level)

    def chosen(self, axis: Axis, level: int = 0) -> int | None:
        """The int tile a target or the user chose for ``axis`` at ``level``, else ``None``
        (what a template reads for its own knobs: rows per work-item, work-group tiles)."""
        for p in self.choices:
            if p.axis == axis and p.level == level and isinstance(p.tile, int):
                return p.tile
        return None

    def with_tiles(self, tiles: dict[Axis | str, int], level: int | None = None) -> Kernel:
        """A copy whose partitions take concrete tiles, keyed by axis or by symbolic tile name
        (``t_<label>``) or axis name; ``level`` restricts the change to one level."""
        parts = []
        for p in self.partitions:
            if level is None or p.level == level:
                for key in (p.axis, p.tile, p.axis.name):
                    if isinstance(key, Axis | str) and key in tiles:
                        p = attrs.evolve(p, tile=tiles[key])
                        break
            parts.append(p)
        return attrs.evolve(self, partitions=parts)

    def with_choices(self, choices: Iterable[Partition]) -> Kernel:
        """A copy with ``choices`` (replacing earlier choices at the same axis and level)."""
        new = list(choices)
        keep = [
            p for p in self.choices if not any(q.axis == p.axis and q.level == p.level for q in new)
        ]
        return attrs.evolve(self, choices=(*keep, *new))

    def describe(self) -> str:
        """Like ``str(kernel)``, with the choices (``group(seq/32@L0)*``) in the schedule."""
        ops = ", ".join(self.graph.nodes[i].op.label for i in self.nodes)
        chosen = set(self.choices)
        parts = " ".join(f"{p}{'*' if p in chosen else ''}" for p in self.schedule.partitions)
        return f"{self.name or 'kernel'}: [{ops}] {parts or 'unpartitioned'}"

    def __str__(self) -> str:
        ops = ", ".join(self.graph.nodes[i].op.label for i in self.nodes)
        parts = " ".join(str(p) for p in self.partitions) or "unpartitioned"
        return f"{self.name or 'kernel'}: [{ops}] {parts}"


def _in_force(kernel: Kernel) -> tuple[Partition, ...]:
    """The planner's partitions with the kernel's choices applied at their (axis, level)."""
    if not kernel.choices:
        return kernel.partitions
    chosen = {(p.axis, p.level): p for p in kernel.choices}
    out = [chosen.pop((p.axis, p.level), p) for p in kernel.partitions]
    return (*out, *chosen.values())


def _touched(kernel: Kernel) -> tuple[Axis, ...]:
    graph = kernel.graph
    seen: dict[Axis, None] = {}
    for i in kernel.nodes:
        n = graph.nodes[i]
        for v in (*n.inputs, *n.outputs):
            for a in graph.values[v].axes:
                seen.setdefault(a)
        for a in n.op.axes():
            seen.setdefault(a)
    return tuple(seen)


def _validate(kernel: Kernel) -> Schedule:
    """Reject impossible schedules with the axis, the op and the fix (see module docstring);
    return the kernel's ``Schedule``."""
    from ncd.streaming import REDUCING, analyse_stream, is_rename, role

    graph = kernel.graph
    axes = _touched(kernel)
    aliases: dict[Axis, Axis] = {}
    contracted: dict[Axis, None] = {}
    for i in kernel.nodes:
        node = graph.nodes[i]
        if is_rename(node.op):
            aliases[node.op.out_axes[0]] = node.op.in_axes[0]  # type: ignore[attr-defined]
        for a in node.op.axes():
            if a not in node.loop and role(node, a) in REDUCING:
                contracted.setdefault(a)
    parts = _in_force(kernel)
    present = set(axes)
    seen: set[tuple[str, int]] = set()
    accumulators: dict[int, str] = {}
    streamed: Axis | None = None
    for p in parts:
        ax = p.axis.describe()
        if p.axis not in present:
            have = ", ".join(a.ref for a in axes)
            raise ScheduleError(
                f"kernel {kernel.name or '?'}: {p} partitions {ax}, which none of its ops "
                f"touches (it has {have}). Fix: partition one of those axes."
            )
        if (p.axis.uid, p.level) in seen:
            raise ScheduleError(
                f"kernel {kernel.name or '?'}: {ax} has two partitions at level {p.level}. "
                "Fix: keep one partition per axis and level."
            )
        seen.add((p.axis.uid, p.level))
        size = graph.size(p.axis) if p.axis.uid in graph.axis_by_uid else p.axis.size
        if isinstance(p.tile, int) and not isinstance(p.tile, bool):
            if p.tile < 1:
                raise ScheduleError(
                    f"kernel {kernel.name or '?'}: tile {p.tile} of {ax} must be >= 1"
                )
            if size is not None and size % p.tile and not p.tail:
                raise ScheduleError(
                    f"kernel {kernel.name or '?'}: tile {p.tile} does not divide {ax} and {p} "
                    f"declares no tail handling. Fix: pick a divisor of {size}, or set tail=True "
                    "so instances mask the remainder."
                )
        if p.kind == "stream" and p.level == 0:
            analysis = analyse_stream(graph, kernel.nodes, p.axis, kernel.outputs)
            if streamed is None:
                streamed, accumulators = p.axis, analysis.kinds
        elif p.kind == "group" and p.level == 0:
            for i in kernel.nodes:
                r = role(graph.nodes[i], p.axis)
                if r in REDUCING or r in ("normalise", "whole"):
                    node = graph.nodes[i]
                    raise ScheduleError(
                        f"kernel {kernel.name or '?'}: {p} groups {ax}, but {node.op.label} "
                        f"[node {i}] {'reduces' if r in REDUCING else 'needs all of'} it ({r}); "
                        "independent level-0 groups cannot share that. Fix: stream "
                        f"{p.axis.name}, or group it at level 1 (cooperating workers)."
                    )
    _check_choices(kernel, parts)

    def root(a: Axis) -> Axis:
        while a in aliases:
            a = aliases[a]
        return a

    grid = tuple(dict.fromkeys(root(p.axis) for p in parts if p.kind == "group" and p.level == 0))
    return Schedule(
        kernel.inputs,
        kernel.outputs,
        axes,
        aliases,
        grid,
        streamed,
        accumulators,
        tuple(contracted),
        parts,
    )


def _check_choices(kernel: Kernel, parts: tuple[Partition, ...]) -> None:
    """A chosen tile is an int that nests inside its outer level's tile (a target may choose
    a tile past its axis's end: instances mask the tail; ``ncd.plan``'s ``tiles=`` checks the
    user's against the axis size)."""
    for p in kernel.choices:
        where = f"kernel {kernel.name or '?'}: the chosen {p} of {p.axis.describe()}"
        if not isinstance(p.tile, int) or isinstance(p.tile, bool):
            raise ScheduleError(
                f"{where} needs an int tile. Fix: give an int between 1 and its size."
            )
        outer = [
            q for q in parts if q.axis == p.axis and q.level < p.level and isinstance(q.tile, int)
        ]
        for q in outer:
            if p.tile > q.tile:  # type: ignore[operator]
                raise ScheduleError(
                    f"{where} does not fit inside its level-{q.level} tile {q.tile}. Fix: a tile "
                    f"of at most {q.tile} at level {p.level}, or a larger level-{q.level} tile."
                )


@attrs.frozen
class Boundary:
    """A value kept in memory between kernels, and why the planner did not fuse across it."""

    value: int
    producer: int | None  # kernel index
    consumers: tuple[int, ...]
    reason: str


@attrs.frozen
class FusionPlan:
    """Kernels in launch order, and the reason for every boundary between them."""

    graph: Graph = attrs.field(repr=False, eq=False)
    kernels: tuple[Kernel, ...] = attrs.field(converter=_kernels)
    boundaries: tuple[Boundary, ...] = attrs.field(default=(), converter=_boundaries)
    #: the target whose renderer this plan is (``ncd.plan(model, target=...)``); ``None``:
    #: ncd's own plan (``ncd.fuse``)
    target: str | None = None
    #: ``ncd.fuse(objective="time")``: ``(plan, seconds)`` of each plan the cost model priced,
    #: the chosen one first (its alternative's price beside it); empty otherwise
    priced: tuple[tuple[str, float], ...] = ()

    def __str__(self) -> str:
        lines = [f"fusion plan: {len(self.kernels)} kernel(s) for {len(self.graph.nodes)} op(s)"]
        if self.target is not None:
            lines[0] += f" as target {self.target!r} renders them (* = the target's choice)"
        for k in self.kernels:
            lines.append(f"  {k.describe() if self.target is not None else k}")
        for b in self.boundaries:
            t = self.graph.values[b.value]
            lines.append(f"  boundary at value {b.value} {t}: {b.reason}")
        return "\n".join(lines)


def kernel_io(graph: Graph, nodes: Iterable[int]) -> tuple[tuple[int, ...], tuple[int, ...]]:
    """The values a set of nodes reads from outside, and those it must write out (used
    outside the set or graph outputs): ``ncd.walk.boundary``."""
    return boundary(graph, nodes)


def unfused(model: object) -> FusionPlan:
    """One kernel per node, every intermediate in memory (the baseline plan)."""
    from ncd.graph import as_graph

    graph = as_graph(model, "ncd.kernel.unfused")
    kernels = []
    for i, node in enumerate(graph.nodes):
        ins, outs = kernel_io(graph, [i])
        kernels.append(Kernel(graph, (i,), ins, outs, (), f"k{i}_{node.op.kind}"))
    return FusionPlan(graph, kernels, ())
