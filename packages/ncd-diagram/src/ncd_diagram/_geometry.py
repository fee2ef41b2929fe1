"""The geometry of a laid-out block: ports, placed nodes, routes, and walks over them."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Literal

import attrs

from ncd.axis import Axis
from ncd_diagram.structure import Item

__all__ = ["Layout", "NodeKind", "Placed", "Port", "Route", "mid", "route_points", "walk"]

NodeKind = Literal["item", "dummy", "in", "out"]


@attrs.define(eq=False)
class Port:
    """One value at one side of a node: its axes in drawing order and their y offsets."""

    value: int
    axes: tuple[Axis, ...]
    ys: tuple[float, ...] = ()

    def y_of(self, axis: Axis) -> float:
        return self.ys[self.axes.index(axis)]


@attrs.define(eq=False)
class Placed:
    """A node of one block's layout (an item, a dummy bend, or the block's boundary)."""

    kind: NodeKind
    item: Item | None
    ins: list[Port]
    outs: list[Port]
    w: float = 0.0
    h: float = 0.0
    x: float = 0.0
    y: float = 0.0
    layer: int = 0
    inner: Layout | None = None  # the layout inside an open block or repeat
    inner_dx: float = 0.0
    inner_dy: float = 0.0


@attrs.define(eq=False)
class Route:
    """A value from one node's output port to another's input port, through dummies."""

    value: int
    src: tuple[int, int]
    dst: tuple[int, int]
    via: list[int]


@attrs.define(eq=False)
class Layout:
    nodes: list[Placed]  # [input boundary, *children, output boundary, *dummies]
    routes: list[Route]
    w: float
    h: float
    out_index: int

    @property
    def entry(self) -> Placed:
        return self.nodes[0]

    @property
    def exit(self) -> Placed:
        return self.nodes[self.out_index]


def mid(p: Port) -> float:
    return (p.ys[0] + p.ys[-1]) / 2 if p.ys else 0.0


def route_points(
    lay: Layout, r: Route, axis: Axis, ox: float = 0.0, oy: float = 0.0
) -> list[tuple[float, float]]:
    """Where the wire of ``axis`` in route ``r`` runs, offset by ``(ox, oy)``."""
    src, dst = lay.nodes[r.src[0]], lay.nodes[r.dst[0]]
    pts = [(ox + src.x + src.w, oy + src.y + src.outs[r.src[1]].y_of(axis))]
    for d in r.via:
        dn = lay.nodes[d]
        y = oy + dn.y + dn.ins[0].y_of(axis)
        pts.append((ox + dn.x, y))
        if dn.w > 0:
            pts.append((ox + dn.x + dn.w, y))
    pts.append((ox + dst.x, oy + dst.y + dst.ins[r.dst[1]].y_of(axis)))
    return pts


def walk(
    lay: Layout, ox: float = 0.0, oy: float = 0.0, depth: int = 0
) -> Iterator[tuple[Layout, Placed, float, float, int]]:
    """Every item node of ``lay`` and of the layouts nested in it, with absolute positions."""
    for n in lay.nodes:
        if n.kind != "item":
            continue
        yield lay, n, ox + n.x, oy + n.y, depth
        if n.inner is not None:
            yield from walk(n.inner, ox + n.x + n.inner_dx, oy + n.y + n.inner_dy, depth + 1)
