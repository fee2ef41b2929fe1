"""A kernel schedule (``ncd.kernel.FusionPlan``, e.g. ``ncd.fuse(model)`` or
``ncd.plan(model, target="opencl")``) as drawing annotations.

Ops of one kernel get a dashed outline; values a kernel keeps on chip are underlaid with the
colour of memory level 1, values that cross kernels (or the model boundary) with level 0;
every partition in force in a kernel's schedule (``kernel.schedule.partitions``: the planner's,
with a target's choices applied) is a hexagon on its axis at each op of the kernel that loops
over it, labelled ``g``/``s`` (group/stream) and its level; a target's choice is marked ``*``
in its tooltip.
"""

from __future__ import annotations

from typing import Any

from ncd.axis import Axis
from ncd.graph import Graph
from ncd.kernel import FusionPlan, Kernel, Partition
from ncd_diagram.errors import DiagramError

__all__ = ["PlanView", "partition_label"]


def partition_label(p: Partition) -> str:
    """``g0`` / ``s1``: kind initial and memory level."""
    return f"{p.kind[0]}{p.level}"


class PlanView:
    """Lookups the renderers need from a fusion plan over ``graph``."""

    def __init__(self, graph: Graph, plan: FusionPlan) -> None:
        if not isinstance(plan, FusionPlan):
            raise DiagramError(f"plan= must be an ncd.kernel.FusionPlan, got {type(plan).__name__}")
        if plan.graph is not graph and plan.graph != graph:
            raise DiagramError(
                "plan= was made for a different graph than the one drawn; build it from the same "
                "model (e.g. ncd.fuse(model) or ncd.kernel.unfused(model)) and pass that model"
            )
        self.plan = plan
        self.node_kernel: dict[int, int] = {}
        for k, kern in enumerate(plan.kernels):
            for i in kern.nodes:
                if i in self.node_kernel:
                    raise DiagramError(
                        f"plan puts node {i} in kernels {self.node_kernel[i]} and {k}"
                    )
                self.node_kernel[i] = k
        io: set[int] = {*graph.inputs, *graph.outputs}
        for kern in plan.kernels:
            io.update(kern.inputs)
            io.update(kern.outputs)
        self.io = io
        self.marks = self._marks(graph)

    def kernel_of(self, node: int) -> tuple[int, str] | None:
        k = self.node_kernel.get(node)
        return None if k is None else (k, self.plan.kernels[k].name or f"k{k}")

    def kernel(self, node: int) -> Kernel | None:
        k = self.node_kernel.get(node)
        return None if k is None else self.plan.kernels[k]

    def memory_level(self, value: int) -> int:
        """0 for values kept in memory between kernels, 1 for values a kernel keeps on chip."""
        return 0 if value in self.io else 1

    def partitions_of(self, node: int) -> list[tuple[Axis, str, str]]:
        """(axis, short label, full description) of the partitions first met at this node: each
        partition is marked once per kernel, where its axis enters the kernel."""
        return self.marks.get(node, [])

    def _marks(self, graph: Graph) -> dict[int, list[tuple[Axis, str, str]]]:
        marks: dict[int, list[tuple[Axis, str, str]]] = {}
        for kern in self.plan.kernels:
            chosen = set(kern.choices)
            for p in kern.schedule.partitions:
                for i in kern.nodes:
                    n = graph.nodes[i]
                    if any(p.axis in graph.values[v].axes for v in (*n.inputs, *n.outputs)):
                        star = "*" if p in chosen else ""
                        marks.setdefault(i, []).append(
                            (p.axis, partition_label(p), f"{kern.name or 'kernel'}: {p}{star}")
                        )
                        break
        return marks

    def to_dict(self) -> dict[str, Any]:
        out = self._dict()
        if self.plan.target is not None:  # a target's plan: its choices are marked
            out["target"] = self.plan.target
            for k, row in zip(self.plan.kernels, out["kernels"], strict=True):
                chosen = set(k.choices)
                for p, entry in zip(k.schedule.partitions, row["partitions"], strict=True):
                    entry["chosen"] = p in chosen
        return out

    def _dict(self) -> dict[str, Any]:
        return {
            "kernels": [
                {
                    "name": k.name,
                    "nodes": list(k.nodes),
                    "inputs": list(k.inputs),
                    "outputs": list(k.outputs),
                    "partitions": [
                        {
                            "axis": p.axis.uid,
                            "kind": p.kind,
                            "tile": p.tile,
                            "level": p.level,
                            "tail": p.tail,
                        }
                        for p in k.schedule.partitions
                    ],
                }
                for k in self.plan.kernels
            ],
            "boundaries": [
                {
                    "value": b.value,
                    "producer": b.producer,
                    "consumers": list(b.consumers),
                    "reason": b.reason,
                }
                for b in self.plan.boundaries
            ],
        }
