"""A layered (Sugiyama-style) layout, computed per open block from the inside out.

Each open block is laid out on its own: its children become nodes on layers (longest path from
the block's input boundary), values that skip layers get one dummy node per layer (shared by all
their consumers), barycenter sweeps reorder each layer to keep crossings low, and y positions
align every node's ports with those of its sources. The finished block is then one node of known
size (with its port positions) in its parent's layout. Flow runs left to right; every port
stacks one wire slot per axis, so a value of three axes enters a box as three parallel wires.
"""

from __future__ import annotations

from ncd.graph import Graph
from ncd_diagram._geometry import Layout, NodeKind, Placed, Port, Route, mid, route_points, walk
from ncd_diagram._layered import SWEEPS, assign_layers, crossings, dummies, order
from ncd_diagram.structure import TIMES, Block, Item, OpBox, Repeat
from ncd_diagram.theme import Theme

__all__ = [
    "STACK_OFFSET",
    "Layout",
    "Placed",
    "Port",
    "Route",
    "crossings",
    "layout",
    "route_points",
    "walk",
]

STACK_OFFSET = 5.0  # shift of each shadow box behind a Repeat


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

    def boxed(
        self,
        kind: NodeKind,
        item: Item | None,
        ins: list[Port],
        outs: list[Port],
        label: str,
        min_w: float,
    ) -> Placed:
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
            return self.boxed(
                "item", item, self.op_ports(item), self.ports(item.outputs), item.label, 44.0
            )
        body = item.body if isinstance(item, Repeat) else item
        assert isinstance(body, Block)
        ins, outs = self.ports(item.inputs), self.ports(item.outputs)
        if not body.open:
            badge = (
                self.text_w(f"{TIMES}{len(item.blocks)}") + 10 if isinstance(item, Repeat) else 0.0
            )
            p = self.boxed("item", item, ins, outs, item.label, 60.0)
            p.w += badge
        else:
            inner = self.block(body.children, body.inputs, body.outputs)
            t = self.t
            title = t.font_size + 18  # the title line, then air above the top wire
            w = max(inner.w + 2 * t.padding, self.text_w(item.label) + 60)
            dx = (w - inner.w) / 2
            # The block's ports sit where its inner boundaries put them.
            for mine, side, theirs in (
                (ins, inner.entry, inner.entry.outs),
                (outs, inner.exit, inner.exit.ins),
            ):
                for p_, q in zip(mine, theirs, strict=True):
                    p_.ys = tuple(title + side.y + y for y in q.ys)
            p = Placed(
                "item",
                item,
                ins,
                outs,
                w=w,
                h=inner.h + title + self.t.padding,
                inner=inner,
                inner_dx=dx,
                inner_dy=title,
            )
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
        edges = [
            (source[p.value], (i, k))
            for i, n in enumerate(nodes)
            for k, p in enumerate(n.ins)
            if p.value in source
        ]
        assign_layers(nodes, edges)
        routes = dummies(nodes, edges, self.g, self.t.wire_gap)
        layers = order(nodes, routes)
        w, h = self.coordinates(nodes, layers, routes)
        return Layout(nodes, routes, w, h, out_index)

    def coordinates(
        self, nodes: list[Placed], layers: list[list[int]], routes: list[Route]
    ) -> tuple[float, float]:
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

    def align(
        self,
        nodes: list[Placed],
        members: list[int],
        links: dict[int, list[tuple[int, int, int]]],
        down: bool,
    ) -> None:
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
                total += other.y + mid(theirs) - mid(mine)
            want.append(total / len(ls))
        # Keep the layer order: each node at least a gap below the one before it.
        ys = list(want)
        for k in range(1, len(members)):
            ys[k] = max(ys[k], ys[k - 1] + nodes[members[k - 1]].h + gap)
        for i, y in zip(members, ys):
            nodes[i].y = y
