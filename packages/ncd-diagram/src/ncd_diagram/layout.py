"""A layered (Sugiyama-style) layout, computed per open block from the inside out.

Each open block is laid out on its own: its children become nodes on layers (longest path from
the block's input boundary), values that skip layers get one dummy node per layer (shared by all
their consumers), barycenter sweeps reorder each layer to keep crossings low, and y positions
align every node's ports with those of its sources. The finished block is then one node of known
size (with its port positions) in its parent's layout. Flow runs left to right; every port
stacks one wire slot per axis, so a value of three axes enters a box as three parallel wires.
"""

from __future__ import annotations

import itertools
from collections.abc import Iterator
from typing import Literal

import attrs

from ncd.axis import Axis
from ncd.graph import Graph
from ncd_diagram.structure import TIMES, Block, Item, OpBox, Repeat
from ncd_diagram.theme import Theme

__all__ = ["Layout", "Placed", "Port", "Route", "crossings", "layout", "route_points", "walk"]

NodeKind = Literal["item", "dummy", "in", "out"]
STACK_OFFSET = 5.0  # shift of each shadow box behind a Repeat
SWEEPS = 4


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


def layout(graph: Graph, root: Block, theme: Theme) -> Layout:
    """Lay out the open block ``root`` (and, recursively, every open block inside it)."""
    return _Engine(graph, theme).block(root.children, root.inputs, root.outputs)


class _Engine:
    def __init__(self, graph: Graph, theme: Theme) -> None:
        self.g, self.t = graph, theme

    # -- sizing ----------------------------------------------------------------------------------
    def text_w(self, text: str, size: float | None = None) -> float:
        return len(text) * (size or self.t.font_size) * 0.6

    def stack(self, ports: list[Port], top: float) -> float:
        """Give ports their y offsets from ``top``; return the stack height."""
        y = top
        for k, p in enumerate(ports):
            if k:
                y += self.t.segment_gap
            p.ys = tuple(y + (i + 0.5) * self.t.wire_gap for i in range(len(p.axes)))
            y += len(p.axes) * self.t.wire_gap
        return y - top

    def height(self, ports: list[Port]) -> float:
        n = sum(len(p.axes) for p in ports)
        return n * self.t.wire_gap + max(0, len(ports) - 1) * self.t.segment_gap

    def ports(self, values: list[int]) -> list[Port]:
        return [Port(v, self.g.values[v].axes) for v in values]

    def op_ports(self, box: OpBox) -> list[Port]:
        out = []
        for k, v in enumerate(box.inputs):
            have = self.g.values[v].axes
            core = box.core_in[k] if k < len(box.core_in) else ()
            order = [a for a in box.loop if a in have] + [a for a in core if a in have]
            order += [a for a in have if a not in order]
            out.append(Port(v, tuple(order)))
        return out

    def boxed(self, kind: NodeKind, item: Item | None, ins: list[Port], outs: list[Port],
              label: str, min_w: float) -> Placed:
        """A box with a label band on top and its port stacks centred below it."""
        t = self.t
        band = t.font_size + 8 if label else 0.0
        body = max(self.height(ins), self.height(outs), 2 * t.wire_gap)
        h = band + body + t.wire_gap * 1.5
        for ports in (ins, outs):
            self.stack(ports, band + (h - band - self.height(ports)) / 2)
        w = max(min_w, self.text_w(label) + 16)
        return Placed(kind, item, ins, outs, w=w, h=h)

    def node(self, item: Item) -> Placed:
        if isinstance(item, OpBox):
            return self.boxed("item", item, self.op_ports(item), self.ports(item.outputs),
                              item.label, 44.0)
        body = item.body if isinstance(item, Repeat) else item
        assert isinstance(body, Block)
        ins, outs = self.ports(item.inputs), self.ports(item.outputs)
        if not body.open:
            badge = self.text_w(f"{TIMES}{len(item.blocks)}") + 10 if isinstance(item, Repeat) else 0.0
            p = self.boxed("item", item, ins, outs, item.label, 60.0)
            p.w += badge
        else:
            inner = self.block(body.children, body.inputs, body.outputs)
            t = self.t
            title = t.font_size + 18  # the title line, then air above the top wire
            w = max(inner.w + 2 * t.padding, self.text_w(item.label) + 60)
            dx = (w - inner.w) / 2
            # The block's ports sit where its inner boundaries put them.
            for mine, side, theirs in ((ins, inner.entry, inner.entry.outs),
                                       (outs, inner.exit, inner.exit.ins)):
                for p_, q in zip(mine, theirs, strict=True):
                    p_.ys = tuple(title + side.y + y for y in q.ys)
            p = Placed("item", item, ins, outs, w=w, h=inner.h + title + self.t.padding,
                       inner=inner, inner_dx=dx, inner_dy=title)
        if isinstance(item, Repeat):  # room for the stacked shadows behind the front box
            extra = 2 * STACK_OFFSET
            p.w += extra
            p.h += extra
            p.inner_dy += extra
            for port in (*p.ins, *p.outs):
                port.ys = tuple(y + extra for y in port.ys)
        return p

    # -- one block -------------------------------------------------------------------------------
    def block(self, children: list[Item], inputs: list[int], outputs: list[int]) -> Layout:
        nodes: list[Placed] = [Placed("in", None, [], self.ports(inputs))]
        self.stack(nodes[0].outs, 0.0)
        nodes[0].h = self.height(nodes[0].outs)
        nodes.extend(self.node(c) for c in children)
        out = Placed("out", None, self.ports(outputs), [])
        self.stack(out.ins, 0.0)
        out.h = self.height(out.ins)
        nodes.append(out)
        out_index = len(nodes) - 1
        source: dict[int, tuple[int, int]] = {}
        for i, n in enumerate(nodes[:-1]):
            for k, p in enumerate(n.outs):
                source.setdefault(p.value, (i, k))
        edges = [(source[p.value], (i, k)) for i, n in enumerate(nodes)
                 for k, p in enumerate(n.ins) if p.value in source]
        _assign_layers(nodes, edges)
        routes = _dummies(nodes, edges, self.g, self.t.wire_gap)
        layers = _order(nodes, routes)
        w, h = self.coordinates(nodes, layers, routes)
        return Layout(nodes, routes, w, h, out_index)

    def coordinates(self, nodes: list[Placed], layers: list[list[int]],
                    routes: list[Route]) -> tuple[float, float]:
        t = self.t
        x = 0.0
        for members in layers:
            width = max((nodes[i].w for i in members), default=0.0)
            for i in members:
                if nodes[i].kind == "dummy":  # a bend spans its column: wires run straight by
                    nodes[i].w = width
                nodes[i].x = x + (width - nodes[i].w) / 2
            x += width + t.layer_gap
        preds: dict[int, list[tuple[int, int, int]]] = {}
        succs: dict[int, list[tuple[int, int, int]]] = {}
        for r in routes:
            chain = [r.src[0], *r.via, r.dst[0]]
            ports = [r.src[1], *([0] * len(r.via)), r.dst[1]]
            for (a, pa), (b, pb) in zip(zip(chain, ports), zip(chain[1:], ports[1:])):
                preds.setdefault(b, []).append((a, pa, pb))
                succs.setdefault(a, []).append((b, pb, pa))
        y0 = 0.0
        for members in layers:  # initial stacking
            y = y0
            for i in members:
                nodes[i].y = y
                y += nodes[i].h + t.row_gap
        for sweep in range(2 * SWEEPS + 1):
            down = sweep % 2 == 0
            seq = layers if down else layers[::-1]
            for members in seq:
                self.align(nodes, members, preds if down else succs, down)
        top = min((n.y for n in nodes), default=0.0)
        for n in nodes:
            n.y -= top
        return max(x - t.layer_gap, 0.0), max((n.y + n.h for n in nodes), default=0.0)

    def align(self, nodes: list[Placed], members: list[int],
              links: dict[int, list[tuple[int, int, int]]], down: bool) -> None:
        """Move each node so its ports line up with its neighbours', keeping the layer order."""
        gap = self.t.row_gap
        want = []
        for i in members:
            n = nodes[i]
            ls = links.get(i, [])
            if not ls:
                want.append(n.y)
                continue
            total = 0.0
            for j, pj, pi in ls:
                other = nodes[j]
                theirs = (other.outs if down else other.ins)[pj]
                mine = (n.ins if down else n.outs)[pi]
                total += other.y + _mid(theirs) - _mid(mine)
            want.append(total / len(ls))
        # Keep the layer order: each node at least a gap below the one before it.
        ys = list(want)
        for k in range(1, len(members)):
            ys[k] = max(ys[k], ys[k - 1] + nodes[members[k - 1]].h + gap)
        for i, y in zip(members, ys):
            nodes[i].y = y


def _mid(p: Port) -> float:
    return (p.ys[0] + p.ys[-1]) / 2 if p.ys else 0.0


def _assign_layers(nodes: list[Placed], edges: list[tuple[tuple[int, int], tuple[int, int]]]) -> None:
    """Longest path from the input boundary; sources with no inputs sit just before their first
    consumer; the output boundary takes the last layer."""
    preds: dict[int, list[int]] = {}
    succs: dict[int, list[int]] = {}
    for (a, _), (b, _) in edges:
        if a < b:  # children are in node order, so this keeps the graph acyclic
            preds.setdefault(b, []).append(a)
            succs.setdefault(a, []).append(b)
    last = len(nodes) - 1
    for i in range(1, last):
        nodes[i].layer = 1 + max((nodes[j].layer for j in preds.get(i, [])), default=0)
    for i in range(last - 1, 0, -1):  # pull input-less nodes next to their consumers
        if not preds.get(i) and succs.get(i):
            nodes[i].layer = max(1, min(nodes[j].layer for j in succs[i]) - 1)
    nodes[last].layer = 1 + max((n.layer for n in nodes[:last]), default=0)


def _dummies(nodes: list[Placed], edges: list[tuple[tuple[int, int], tuple[int, int]]],
             graph: Graph, gap: float) -> list[Route]:
    chains: dict[tuple[int, int], list[int]] = {}
    routes = []
    for src, dst in edges:
        a, b = nodes[src[0]], nodes[dst[0]]
        value = a.outs[src[1]].value
        chain = chains.setdefault(src, [])
        via = []
        for layer in range(a.layer + 1, b.layer):
            k = layer - a.layer - 1
            if k == len(chain):
                port = Port(value, graph.values[value].axes)
                d = Placed("dummy", None, [port], [port], layer=layer)
                port.ys = tuple((i + 0.5) * gap for i in range(len(port.axes)))
                d.h = len(port.axes) * gap
                nodes.append(d)
                chain.append(len(nodes) - 1)
            via.append(chain[k])
        routes.append(Route(value, src, dst, via))
    return routes


def _order(nodes: list[Placed], routes: list[Route]) -> list[list[int]]:
    """Barycenter sweeps: each layer sorted by the mean position of its neighbours."""
    depth = 1 + max(n.layer for n in nodes)
    layers: list[list[int]] = [[] for _ in range(depth)]
    for i, n in enumerate(nodes):
        layers[n.layer].append(i)
    # Neighbour positions carry the port's fraction, so wires into port 0 sort above port 1.
    up: dict[int, list[tuple[int, float]]] = {}
    down: dict[int, list[tuple[int, float]]] = {}
    for r in routes:
        chain = [r.src[0], *r.via, r.dst[0]]
        src_frac = r.src[1] / (len(nodes[r.src[0]].outs) + 1)
        dst_frac = r.dst[1] / (len(nodes[r.dst[0]].ins) + 1)
        for k, (a, b) in enumerate(itertools.pairwise(chain)):
            up.setdefault(b, []).append((a, src_frac if k == 0 else 0.0))
            down.setdefault(a, []).append((b, dst_frac if k == len(chain) - 2 else 0.0))
    pos = {i: k for members in layers for k, i in enumerate(members)}
    for sweep in range(SWEEPS):
        seq = range(1, depth) if sweep % 2 == 0 else range(depth - 2, -1, -1)
        links = up if sweep % 2 == 0 else down
        for layer in seq:
            members = layers[layer]
            key = {i: (sum(pos[j] + f for j, f in links[i]) / len(links[i]) if links.get(i)
                       else float(pos[i])) for i in members}
            members.sort(key=lambda i: key[i])
            for k, i in enumerate(members):
                pos[i] = k
    return layers


def route_points(lay: Layout, r: Route, axis: Axis, ox: float = 0.0,
                 oy: float = 0.0) -> list[tuple[float, float]]:
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


def walk(lay: Layout, ox: float = 0.0, oy: float = 0.0,
         depth: int = 0) -> Iterator[tuple[Layout, Placed, float, float, int]]:
    """Every item node of ``lay`` and of the layouts nested in it, with absolute positions."""
    for n in lay.nodes:
        if n.kind != "item":
            continue
        yield lay, n, ox + n.x, oy + n.y, depth
        if n.inner is not None:
            yield from walk(n.inner, ox + n.x + n.inner_dx, oy + n.y + n.inner_dy, depth + 1)


def crossings(lay: Layout) -> int:
    """Pairs of value segments that cross between adjacent layers of one layout (its nested
    layouts not included): a measure of how tangled the ordering left it."""
    segments: dict[int, list[tuple[float, float]]] = {}
    for r in lay.routes:
        chain = [r.src, *((d, 0) for d in r.via), r.dst]
        for (a, pa), (b, pb) in itertools.pairwise(chain):
            na, nb = lay.nodes[a], lay.nodes[b]
            ya = na.y + _mid(na.outs[pa] if (a, pa) == r.src else na.outs[0])
            yb = nb.y + _mid(nb.ins[pb] if (b, pb) == r.dst else nb.ins[0])
            segments.setdefault(na.layer, []).append((ya, yb))
    count = 0
    for segs in segments.values():
        for i, (a0, a1) in enumerate(segs):
            for b0, b1 in segs[i + 1:]:
                if (a0 - b0) * (a1 - b1) < 0:
                    count += 1
    return count
