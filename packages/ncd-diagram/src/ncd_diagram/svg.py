"""Native SVG in the neural-circuit-diagram style, drawn from a computed layout.

Wires are axes: every value is drawn as one line per axis, coloured by the axis uid and labelled
with its name and size. Ops are boxes (learned ops bold); a lifted op's loop axes weave through
its box over a halo; contracted axes join at a dot; an einsum's kept axes pass through; tuple
segments of a port are set apart and marked. Open definitions are nested tinted boxes, closed
ones solid boxes, a repeat (xN) a stack of boxes with a badge. Elements carry ``class`` and
``data-*`` attributes (axis uid, value id, node id) so tests and tools can query the drawing.
"""

from __future__ import annotations

import xml.etree.ElementTree as ET
from collections.abc import Iterable

from ncd.axis import Axis
from ncd.graph import Graph
from ncd_diagram._svg_base import SVG_NS, axis_text, fmt, path
from ncd_diagram._svg_ops import OpPainter
from ncd_diagram.dot import printable
from ncd_diagram.kernels import PlanView
from ncd_diagram.layout import STACK_OFFSET, Layout, Placed, Port, Route, route_points
from ncd_diagram.structure import TIMES, Block, OpBox, Repeat
from ncd_diagram.theme import Theme

__all__ = ["axis_text", "to_svg"]


class _Canvas(OpPainter):
    """Blocks, repeats and routed wires, walking the nested layouts."""

    # -- a layout ----------------------------------------------------------------------------------
    def draw(self, lay: Layout, ox: float, oy: float, depth: int) -> None:
        for n in lay.nodes:
            if n.kind == "item":
                self.node(n, ox + n.x, oy + n.y, depth)
        labelled: set[tuple[int, int]] = set()
        for r in lay.routes:
            first = r.src not in labelled  # label each output port's wires once
            labelled.add(r.src)
            self.route(lay, r, ox, oy, first)

    def route(self, lay: Layout, r: Route, ox: float, oy: float, label: bool) -> None:
        level = self.plan.memory_level(r.value) if self.plan else None
        for a in lay.nodes[r.src[0]].outs[r.src[1]].axes:
            pts = route_points(lay, r, a, ox, oy)
            if level is not None:
                ET.SubElement(
                    self.memory,
                    "path",
                    {
                        "d": path(pts),
                        "fill": "none",
                        "stroke": self.t.memory_colour(level),
                        "stroke-width": fmt(self.t.wire_gap),
                        "stroke-linecap": "round",
                        "class": "memory",
                        "data-level": str(level),
                    },
                )
            self.wire(self.wires, pts, a, r.value, "wire")
            if label:
                x, y = pts[0]
                self.text(
                    self.labels,
                    x + 3,
                    y - 1.5,
                    axis_text(a),
                    self.t.label_size,
                    self.t.axis_colour(a),
                    anchor="start",
                    cls="wire-label",
                )

    def node(self, n: Placed, x: float, y: float, depth: int) -> None:
        item = n.item
        if isinstance(item, OpBox):
            self.op(n, item, x, y)
            return
        assert isinstance(item, Block | Repeat)
        t = self.t
        body = item.body if isinstance(item, Repeat) else item
        assert isinstance(body, Block)
        extra = 2 * STACK_OFFSET if isinstance(item, Repeat) else 0.0
        fy, fw, fh = y + extra, n.w - extra, n.h - extra  # the front box
        fill = t.block_fill if depth % 2 == 0 else t.block_fill_alt
        if isinstance(item, Repeat):
            for k in (2, 1):
                self.rect(
                    self.blocks,
                    x + k * STACK_OFFSET,
                    fy - k * STACK_OFFSET,
                    fw,
                    fh,
                    rx="6",
                    fill=fill,
                    stroke=t.block_stroke,
                    stroke_width=fmt(t.block_stroke_width),
                    **{"class": "repeat-shadow"},
                )
        cls = "repeat" if isinstance(item, Repeat) else "block"
        width = t.block_stroke_width * (1 if body.open else 2)
        el = self.rect(
            self.blocks,
            x,
            fy,
            fw,
            fh,
            rx="6",
            fill=fill,
            stroke=t.block_stroke,
            stroke_width=fmt(width),
            **{
                "class": f"{cls} {'open' if body.open else 'closed'}",
                "data-scope": str(body.scope),
            },
        )
        if isinstance(item, Repeat):
            el.set("data-count", str(item.count))
            label = f"{TIMES}{item.count}"
            bw = len(label) * t.font_size * 0.62 + 10
            bx, by = x + fw - bw - 4, fy + 4
            self.rect(
                self.labels,
                bx,
                by,
                bw,
                t.font_size + 6,
                rx="8",
                fill=t.repeat_badge,
                **{"class": "repeat-badge"},
            )
            self.text(
                self.labels,
                bx + bw / 2,
                by + t.font_size + 1,
                label,
                t.font_size,
                t.background,
                weight="bold",
                cls="repeat-count",
            )
        if n.inner is None:
            self.text(
                self.labels,
                x + (fw - (40 if isinstance(item, Repeat) else 0)) / 2,
                fy + (fh + t.font_size) / 2 - 2,
                item.label,
                t.font_size,
                t.block_title,
                weight="bold",
                cls="block-title",
            )
            self.segments(n.ins, x, y, 0.0)
            self.segments(n.outs, x, y, n.w - extra)
            for p in n.outs:  # wires leave the front box, not the shadows
                self.stub(p, x + fw, y, extra, "out")
            return
        self.text(
            self.labels,
            x + 8,
            fy + t.font_size + 3,
            item.label,
            t.font_size,
            t.block_title,
            anchor="start",
            weight="bold",
            cls="block-title",
        )
        # Stubs join the box edge to the inner boundaries, where the inner wires start and end.
        for p in n.ins:
            self.stub(p, x, y, n.inner_dx, "in")
        start = x + n.inner_dx + n.inner.exit.x
        for p in n.outs:
            self.stub(p, start, y, x + n.w - start, "out")
        self.draw(n.inner, x + n.inner_dx, y + n.inner_dy, depth + 1)

    def stub(self, p: Port, x: float, y: float, w: float, side: str) -> None:
        for a, py in zip(p.axes, p.ys):
            self.wire(self.wires, [(x, y + py), (x + w, y + py)], a, p.value, f"wire stub-{side}")


def to_svg(
    graph: Graph,
    lay: Layout,
    theme: Theme,
    title: str,
    legend: bool = False,
    plan: PlanView | None = None,
) -> str:
    """The whole drawing as SVG text."""
    t = theme
    c = _Canvas(graph, theme, plan)
    top = t.padding + t.font_size + 12
    c.draw(lay, t.padding + 40, top, 0)
    for p in lay.entry.outs:  # lead-in marks for model inputs and outputs
        for a, py in zip(p.axes, p.ys):
            c.wire(
                c.wires,
                [(t.padding, top + lay.entry.y + py), (t.padding + 40, top + lay.entry.y + py)],
                a,
                p.value,
                "wire model-input",
            )
    ex = lay.exit
    for p in ex.ins:
        for a, py in zip(p.axes, p.ys):
            x0 = t.padding + 40 + ex.x
            c.wire(
                c.wires,
                [(x0, top + ex.y + py), (x0 + 40, top + ex.y + py)],
                a,
                p.value,
                "wire model-output",
            )
            c.text(
                c.labels,
                x0 + 4,
                top + ex.y + py - 1.5,
                axis_text(a),
                t.label_size,
                t.axis_colour(a),
                anchor="start",
                cls="wire-label",
            )
    width = lay.w + 2 * t.padding + 80
    height = top + lay.h + t.padding
    legend_el = _legend(c, list(c.used.values()), t, height) if legend else None
    if legend_el is not None:
        height += 18 + 16 * len(c.used)
        width = max(width, 360.0)
    svg = ET.Element(
        "svg",
        {
            "xmlns": SVG_NS,
            "width": fmt(width),
            "height": fmt(height),
            "viewBox": f"0 0 {fmt(width)} {fmt(height)}",
            "font-family": t.font_family,
            "class": f"ncd-diagram theme-{t.name}",
        },
    )
    ET.SubElement(svg, "title").text = title
    c.rect(svg, 0, 0, width, height, fill=t.background, **{"class": "background"})
    c.text(
        svg,
        t.padding,
        t.padding + t.font_size,
        title,
        t.font_size + 2,
        t.foreground,
        anchor="start",
        weight="bold",
        cls="title",
    )
    for g in (c.blocks, c.memory, c.wires, c.ops, c.weave, c.labels):
        svg.append(g)
    if legend_el is not None:
        svg.append(legend_el)
    return printable(ET.tostring(svg, encoding="unicode"), keep="\t\n\r")


def _legend(c: _Canvas, used: Iterable[Axis], t: Theme, y0: float) -> ET.Element:
    g = ET.Element("g", {"class": "legend"})
    c.text(g, t.padding, y0 + 12, "axes", t.font_size, t.foreground, anchor="start", weight="bold")
    for i, a in enumerate(sorted(used, key=lambda a: (a.name, a.uid))):
        y = y0 + 28 + 16 * i
        ET.SubElement(
            g,
            "line",
            {
                "x1": fmt(t.padding),
                "x2": fmt(t.padding + 28),
                "y1": fmt(y - 4),
                "y2": fmt(y - 4),
                "stroke": t.axis_colour(a),
                "stroke-width": "3",
                "class": "legend-swatch",
                "data-axis": a.uid,
            },
        )
        size = "free" if a.size is None else str(a.size)
        c.text(
            g,
            t.padding + 36,
            y,
            f"{a.name}  #{a.uid}  size {size}",
            t.font_size - 1,
            t.foreground,
            anchor="start",
            cls="legend-label",
        )
    return g
