"""Native SVG in the neural-circuit-diagram style, drawn from a computed layout.

Wires are axes: every value is drawn as one line per axis, coloured by the axis uid and labelled
with its name and size. Ops are boxes (learned ops bold); a lifted op's loop axes weave through
its box over a halo; contracted axes join at a dot; an einsum's kept axes pass through; tuple
segments of a port are set apart and marked. Open definitions are nested tinted boxes, closed
ones solid boxes, a repeat (xN) a stack of boxes with a badge. Elements carry ``class`` and
``data-*`` attributes (axis uid, value id, node id) so tests and tools can query the drawing.
"""

from __future__ import annotations

import itertools
import xml.etree.ElementTree as ET
from collections.abc import Iterable

from ncd.axis import Axis
from ncd.graph import Graph
from ncd_diagram.kernels import PlanView
from ncd_diagram.layout import STACK_OFFSET, Layout, Placed, Port, Route, route_points
from ncd_diagram.structure import TIMES, Block, OpBox, Repeat
from ncd_diagram.theme import Theme

__all__ = ["axis_text", "to_svg"]

SVG_NS = "http://www.w3.org/2000/svg"


def _f(v: float) -> str:
    return f"{v:.1f}".rstrip("0").rstrip(".")


def axis_text(a: Axis) -> str:
    """``name size`` for a bound axis, ``name`` for a free one."""
    return a.name if a.size is None else f"{a.name} {a.size}"


def _path(points: list[tuple[float, float]]) -> str:
    """Horizontal-tangent cubic segments through ``points`` (smooth at every bend)."""
    (x0, y0), rest = points[0], points[1:]
    d = [f"M{_f(x0)},{_f(y0)}"]
    for x1, y1 in rest:
        if abs(y1 - y0) < 0.05:
            d.append(f"L{_f(x1)},{_f(y1)}")
        else:
            mx = (x0 + x1) / 2
            d.append(f"C{_f(mx)},{_f(y0)} {_f(mx)},{_f(y1)} {_f(x1)},{_f(y1)}")
        x0, y0 = x1, y1
    return " ".join(d)


class _Canvas:
    """Layers of the drawing, filled by one walk over the nested layouts."""

    def __init__(self, graph: Graph, theme: Theme, plan: PlanView | None) -> None:
        self.g, self.t, self.plan = graph, theme, plan
        self.blocks = ET.Element("g", {"class": "blocks"})
        self.memory = ET.Element("g", {"class": "memory"})
        self.wires = ET.Element("g", {"class": "wires"})
        self.ops = ET.Element("g", {"class": "ops"})
        self.weave = ET.Element("g", {"class": "weave"})
        self.labels = ET.Element("g", {"class": "labels"})
        self.used: dict[str, Axis] = {}

    # -- primitives ------------------------------------------------------------------------------
    def text(self, parent: ET.Element, x: float, y: float, text: str, size: float, fill: str,
             anchor: str = "middle", weight: str = "normal", cls: str = "label") -> None:
        el = ET.SubElement(parent, "text", {
            "x": _f(x), "y": _f(y), "font-size": _f(size), "fill": fill, "text-anchor": anchor,
            "font-weight": weight, "class": cls})
        el.text = text

    def rect(self, parent: ET.Element, x: float, y: float, w: float, h: float, **attrs: str) -> ET.Element:
        base = {"x": _f(x), "y": _f(y), "width": _f(w), "height": _f(h)}
        return ET.SubElement(parent, "rect", {**base, **{k.replace("_", "-"): v for k, v in attrs.items()}})

    def wire(self, parent: ET.Element, points: list[tuple[float, float]], axis: Axis,
             value: int, cls: str, halo: bool = False) -> None:
        self.used.setdefault(axis.uid, axis)
        d = _path(points)
        if halo:
            ET.SubElement(parent, "path", {"d": d, "fill": "none", "stroke": self.t.wire_halo,
                                           "stroke-width": _f(self.t.wire_width + 3), "class": "halo"})
        ET.SubElement(parent, "path", {
            "d": d, "fill": "none", "stroke": self.t.axis_colour(axis), "stroke-width": _f(self.t.wire_width),
            "class": cls, "data-axis": axis.uid, "data-value": str(value)})

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
                ET.SubElement(self.memory, "path", {
                    "d": _path(pts), "fill": "none", "stroke": self.t.memory_colour(level),
                    "stroke-width": _f(self.t.wire_gap), "stroke-linecap": "round",
                    "class": "memory", "data-level": str(level)})
            self.wire(self.wires, pts, a, r.value, "wire")
            if label:
                x, y = pts[0]
                self.text(self.labels, x + 3, y - 1.5, axis_text(a), self.t.label_size, self.t.axis_colour(a),
                          anchor="start", cls="wire-label")

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
                self.rect(self.blocks, x + k * STACK_OFFSET, fy - k * STACK_OFFSET, fw, fh, rx="6",
                          fill=fill, stroke=t.block_stroke, stroke_width=_f(t.block_stroke_width),
                          **{"class": "repeat-shadow"})
        cls = "repeat" if isinstance(item, Repeat) else "block"
        width = t.block_stroke_width * (1 if body.open else 2)
        el = self.rect(self.blocks, x, fy, fw, fh, rx="6", fill=fill, stroke=t.block_stroke,
                       stroke_width=_f(width), **{"class": f"{cls} {'open' if body.open else 'closed'}",
                                                  "data-scope": str(body.scope)})
        if isinstance(item, Repeat):
            el.set("data-count", str(item.count))
            label = f"{TIMES}{item.count}"
            bw = len(label) * t.font_size * 0.62 + 10
            bx, by = x + fw - bw - 4, fy + 4
            self.rect(self.labels, bx, by, bw, t.font_size + 6, rx="8", fill=t.repeat_badge,
                      **{"class": "repeat-badge"})
            self.text(self.labels, bx + bw / 2, by + t.font_size + 1, label, t.font_size,
                      t.background, weight="bold", cls="repeat-count")
        if n.inner is None:
            self.text(self.labels, x + (fw - (40 if isinstance(item, Repeat) else 0)) / 2,
                      fy + (fh + t.font_size) / 2 - 2, item.label, t.font_size, t.block_title,
                      weight="bold", cls="block-title")
            self.segments(n.ins, x, y, 0.0)
            self.segments(n.outs, x, y, n.w - extra)
            for p in n.outs:  # wires leave the front box, not the shadows
                self.stub(p, x + fw, y, extra, "out")
            return
        self.text(self.labels, x + 8, fy + t.font_size + 3, item.label, t.font_size,
                  t.block_title, anchor="start", weight="bold", cls="block-title")
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

    def op(self, n: Placed, box: OpBox, x: float, y: float) -> None:
        t = self.t
        learned = bool(box.learned)
        kernel = self.plan.kernel_of(box.node) if self.plan else None
        el = self.rect(self.ops, x, y, n.w, n.h, rx="4",
                       fill=t.learned_fill if learned else t.box_fill,
                       stroke=t.learned_stroke if learned else t.box_stroke,
                       stroke_width=_f(t.learned_stroke_width if learned else t.box_stroke_width),
                       **{"class": f"op{' learned' if learned else ''}", "data-node": str(box.node),
                          "data-kind": box.kind})
        if box.learned:
            el.set("data-params", " ".join(box.learned))
        node = self.g.nodes[box.node]
        tip = f"{box.label}: [{node.op.core_text()}] over ({' '.join(a.name for a in box.loop)})"
        params = f"\nlearned: {', '.join(box.learned)}" if box.learned else ""
        # No build site here: the drawing depends on the canonical graph only (stable output).
        ET.SubElement(el, "title").text = f"{tip}{params}"
        self.text(self.labels, x + n.w / 2, y + t.font_size + 3, box.label, t.font_size,
                  t.foreground, weight="bold" if learned else "normal", cls="op-label")
        self.segments(n.ins, x, y, 0.0)
        self.segments(n.outs, x, y, n.w)
        self.inside(n, box, x, y)
        if kernel is not None and self.plan is not None:
            k = kernel[0]
            self.rect(self.weave, x - 3, y - 3, n.w + 6, n.h + 6, rx="6", fill="none",
                      stroke=t.kernel_stroke, stroke_width="1.2", stroke_dasharray="4 2",
                      **{"class": "kernel", "data-kernel": str(k)})
            # Which kernel: ops sharing a tag share a launch (full name in the tooltip).
            self.text(self.labels, x + n.w + 3, y - 5, f"k{k}", t.label_size, t.kernel_stroke,
                      anchor="end", weight="bold", cls="kernel-tag")
            seen: dict[Axis, int] = {}
            for axis, label, text in self.plan.partitions_of(box.node):
                # On the axis's wire where it enters the box (or leaves it, for a new axis);
                # a second partition of the same axis (another level) sits beside the first.
                k = seen[axis] = seen.get(axis, -1) + 1
                port = next((p for p in n.ins if axis in p.axes), None)
                if port is not None:
                    hx, hy = x + 9 + 16 * k, y + port.y_of(axis)
                else:
                    port = next((p for p in n.outs if axis in p.axes), None)
                    hx = x + n.w - 9 - 16 * k
                    hy = y + (port.y_of(axis) if port else n.h - 8)
                self.hexagon(hx, hy, label, axis, text)

    def segments(self, ports: list[Port], x: float, y: float, dx: float) -> None:
        """Tuple segments: a short dashed bar between consecutive ports on one side."""
        for p, q in itertools.pairwise(ports):
            if not p.ys or not q.ys:
                continue
            my = y + (p.ys[-1] + q.ys[0]) / 2
            ET.SubElement(self.weave, "line", {
                "x1": _f(x + dx - 5), "x2": _f(x + dx + 5), "y1": _f(my), "y2": _f(my),
                "stroke": self.t.foreground, "stroke-width": "1.2", "stroke-dasharray": "2 1.5",
                "class": "segment"})

    def inside(self, n: Placed, box: OpBox, x: float, y: float) -> None:
        """Loop axes weave through; contracted axes join at a dot; einsum keeps pass through."""
        t = self.t
        loop = set(box.loop)
        contracted = set(box.contracted)
        out_port = {a: p for p in reversed(n.outs) for a in p.axes}
        cy: dict[Axis, list[float]] = {}
        from_value: dict[float, int] = {}
        for p in n.ins:
            for a, py in zip(p.axes, p.ys):
                if a in contracted:
                    cy.setdefault(a, []).append(py)
                    from_value[py] = p.value
        dots: list[tuple[float, float]] = []
        present = [a for a in box.contracted if a in cy]
        if box.learned and present:  # one weight: every contracted axis meets the same dot
            ys = [py for a in present for py in cy[a]]
            dots.append((x + n.w / 2, y + sum(ys) / len(ys)))
            where = dict.fromkeys(present, dots[0])
        else:  # one dot per summed axis, where that axis's wires meet
            where = {}
            for k, a in enumerate(present):
                frac = 0.5 if len(present) == 1 else 0.35 + 0.3 * k / (len(present) - 1)
                where[a] = (x + n.w * frac, y + sum(cy[a]) / len(cy[a]))
                dots.append(where[a])
        for a in present:
            for py in cy[a]:
                self.wire(self.weave, [(x, y + py), where[a]], a, from_value[py],
                          "wire contraction")
        for dx, dy in dots:
            ET.SubElement(self.weave, "circle", {"cx": _f(dx), "cy": _f(dy), "r": "3.2",
                                                 "fill": t.contraction_dot, "class": "contraction-dot"})
        drawn: set[Axis] = set()
        in_y = {a: py for p in n.ins for a, py in zip(p.axes, p.ys)}
        for p in n.ins:  # loop axes: every input carrying one weaves into the output
            for a, py in zip(p.axes, p.ys):
                if a in loop and a in out_port:
                    self.wire(self.weave, [(x, y + py), (x + n.w, y + out_port[a].y_of(a))], a,
                              out_port[a].value, "wire loop", halo=True)
                    drawn.add(a)
        for a, b in box.through:  # kept or renamed core axes run straight through
            if a in in_y and b in out_port and b not in loop:
                self.wire(self.weave, [(x, y + in_y[a]), (x + n.w, y + out_port[b].y_of(b))], b,
                          out_port[b].value, "wire core", halo=True)
                drawn.add(b)
        if dots and box.learned:  # a learned map's new axes leave its weight's dot
            cx, cyy = dots[0]
            for p in n.outs:
                for a, py in zip(p.axes, p.ys):
                    if a not in drawn and a not in loop:
                        self.wire(self.weave, [(cx, cyy), (x + n.w, y + py)], a, p.value, "wire core")

    def hexagon(self, cx: float, cy: float, label: str, axis: Axis, tip: str) -> None:
        r = 7.5
        pts = " ".join(f"{_f(cx + r * dx)},{_f(cy + r * dy)}" for dx, dy in
                       ((1, 0), (0.5, 0.87), (-0.5, 0.87), (-1, 0), (-0.5, -0.87), (0.5, -0.87)))
        hexagon = ET.SubElement(self.weave, "polygon", {
            "points": pts, "fill": self.t.partition_fill, "stroke": self.t.axis_colour(axis), "stroke-width": "1.6",
            "class": "partition", "data-axis": axis.uid, "data-partition": label})
        ET.SubElement(hexagon, "title").text = tip
        self.text(self.weave, cx, cy + 3, label, 7.5, self.t.foreground, cls="partition-label")


def to_svg(graph: Graph, lay: Layout, theme: Theme, title: str, legend: bool = False,
           plan: PlanView | None = None) -> str:
    """The whole drawing as SVG text."""
    t = theme
    c = _Canvas(graph, theme, plan)
    top = t.padding + t.font_size + 12
    c.draw(lay, t.padding + 40, top, 0)
    for p in lay.entry.outs:  # lead-in marks for model inputs and outputs
        for a, py in zip(p.axes, p.ys):
            c.wire(c.wires, [(t.padding, top + lay.entry.y + py), (t.padding + 40, top + lay.entry.y + py)],
                   a, p.value, "wire model-input")
    ex = lay.exit
    for p in ex.ins:
        for a, py in zip(p.axes, p.ys):
            x0 = t.padding + 40 + ex.x
            c.wire(c.wires, [(x0, top + ex.y + py), (x0 + 40, top + ex.y + py)], a, p.value,
                   "wire model-output")
            c.text(c.labels, x0 + 4, top + ex.y + py - 1.5, axis_text(a), t.label_size,
                   t.axis_colour(a),
                   anchor="start", cls="wire-label")
    width = lay.w + 2 * t.padding + 80
    height = top + lay.h + t.padding
    legend_el = _legend(c, list(c.used.values()), t, height) if legend else None
    if legend_el is not None:
        height += 18 + 16 * len(c.used)
        width = max(width, 360.0)
    svg = ET.Element("svg", {
        "xmlns": SVG_NS, "width": _f(width), "height": _f(height),
        "viewBox": f"0 0 {_f(width)} {_f(height)}", "font-family": t.font_family,
        "class": f"ncd-diagram theme-{t.name}"})
    ET.SubElement(svg, "title").text = title
    c.rect(svg, 0, 0, width, height, fill=t.background, **{"class": "background"})
    c.text(svg, t.padding, t.padding + t.font_size, title, t.font_size + 2, t.foreground,
           anchor="start", weight="bold", cls="title")
    for g in (c.blocks, c.memory, c.wires, c.ops, c.weave, c.labels):
        svg.append(g)
    if legend_el is not None:
        svg.append(legend_el)
    return ET.tostring(svg, encoding="unicode")


def _legend(c: _Canvas, used: Iterable[Axis], t: Theme, y0: float) -> ET.Element:
    g = ET.Element("g", {"class": "legend"})
    c.text(g, t.padding, y0 + 12, "axes", t.font_size, t.foreground, anchor="start", weight="bold")
    for i, a in enumerate(sorted(used, key=lambda a: (a.name, a.uid))):
        y = y0 + 28 + 16 * i
        ET.SubElement(g, "line", {"x1": _f(t.padding), "x2": _f(t.padding + 28), "y1": _f(y - 4),
                                  "y2": _f(y - 4), "stroke": t.axis_colour(a), "stroke-width": "3",
                                  "class": "legend-swatch", "data-axis": a.uid})
        size = "free" if a.size is None else str(a.size)
        c.text(g, t.padding + 36, y, f"{a.name}  #{a.uid}  size {size}", t.font_size - 1,
               t.foreground, anchor="start", cls="legend-label")
    return g
