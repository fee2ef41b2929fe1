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
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Literal

import attrs

from ncd.axis import Axis
from ncd.graph import Graph, Node

__all__ = ["Boundary", "FusionPlan", "Kernel", "Partition"]

PartitionKind = Literal["group", "stream"]


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
class Kernel:
    """Nodes of one graph fused into one launch, with their partitions."""

    graph: Graph = attrs.field(repr=False, eq=False)
    nodes: tuple[int, ...] = attrs.field(converter=tuple)
    inputs: tuple[int, ...] = attrs.field(converter=tuple)
    outputs: tuple[int, ...] = attrs.field(converter=tuple)
    partitions: tuple[Partition, ...] = attrs.field(default=(), converter=tuple)
    name: str = ""

    @property
    def ops(self) -> tuple[Node, ...]:
        return tuple(self.graph.nodes[i] for i in self.nodes)

    def axes(self) -> tuple[Axis, ...]:
        """Every axis the kernel's nodes touch, in first-appearance order."""
        seen: dict[Axis, None] = {}
        for n in self.ops:
            for v in (*n.inputs, *n.outputs):
                for a in self.graph.values[v].axes:
                    seen.setdefault(a)
            for a in n.op.axes():
                seen.setdefault(a)
        return tuple(seen)

    def partitions_at(self, level: int) -> tuple[Partition, ...]:
        return tuple(p for p in self.partitions if p.level == level)

    @property
    def streamed(self) -> tuple[Axis, ...]:
        return tuple(dict.fromkeys(p.axis for p in self.partitions if p.kind == "stream"))

    @property
    def grouped(self) -> tuple[Axis, ...]:
        return tuple(dict.fromkeys(p.axis for p in self.partitions if p.kind == "group"))

    def __str__(self) -> str:
        ops = ", ".join(self.graph.nodes[i].op.label for i in self.nodes)
        parts = " ".join(str(p) for p in self.partitions) or "unpartitioned"
        return f"{self.name or 'kernel'}: [{ops}] {parts}"


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
    kernels: tuple[Kernel, ...] = attrs.field(converter=tuple)
    boundaries: tuple[Boundary, ...] = attrs.field(default=(), converter=tuple)

    def __str__(self) -> str:
        lines = [f"fusion plan: {len(self.kernels)} kernel(s) for {len(self.graph.nodes)} op(s)"]
        for k in self.kernels:
            lines.append(f"  {k}")
        for b in self.boundaries:
            t = self.graph.values[b.value]
            lines.append(f"  boundary at value {b.value} {t}: {b.reason}")
        return "\n".join(lines)


def kernel_io(graph: Graph, nodes: Iterable[int]) -> tuple[tuple[int, ...], tuple[int, ...]]:
    """The values a set of nodes reads from outside, and those it must write out (used
    outside the set or graph outputs)."""
    members = set(nodes)
    produced = {v for i in members for v in graph.nodes[i].outputs}
    reads: dict[int, None] = {}
    for i in sorted(members):
        for v in graph.nodes[i].inputs:
            if v not in produced:
                reads.setdefault(v)
    outs = set(graph.outputs)
    writes = [
        v
        for i in sorted(members)
        for v in graph.nodes[i].outputs
        if v in outs or any(c not in members for c in graph.consumers[v])
    ]
    return tuple(reads), tuple(writes)


def unfused(model: object) -> FusionPlan:
    """One kernel per node, every intermediate in memory (the baseline plan)."""
    from ncd._term import Term

    graph = model.graph if isinstance(model, Term) else model
    assert isinstance(graph, Graph)
    kernels = []
    for i, node in enumerate(graph.nodes):
        ins, outs = kernel_io(graph, [i])
        kernels.append(Kernel(graph, (i,), ins, outs, (), f"k{i}_{node.op.kind}"))
    return FusionPlan(graph, kernels, ())
