"""Op boxes in the NCD style: bold when learned, loop axes weaving through over a halo,
contracted axes meeting at a dot, kept or renamed axes running through, tuple segments marked,
and a kernel schedule's outline, tag and partition hexagons."""

from __future__ import annotations

import itertools
import xml.etree.ElementTree as ET

from ncd.axis import Axis
from ncd_diagram._svg_base import CanvasBase, fmt
from ncd_diagram._svg_window import GLYPHS
from ncd_diagram.layout import Placed, Port
from ncd_diagram.structure import OpBox

__all__ = ["OpPainter"]


class OpPainter(CanvasBase):
    """Draws one op box and everything inside it."""

    def op(self, n: Placed, box: OpBox, x: float, y: float) -> None:
        t = self.t
        learned = bool(box.learned)
        kernel = self.plan.kernel_of(box.node) if self.plan else None
        el = self.rect(
            self.ops,
            x,
            y,
            n.w,
            n.h,
            rx="4",
            fill=t.learned_fill if learned else t.box_fill,
            stroke=t.learned_stroke if learned else t.box_stroke,
            stroke_width=fmt(t.learned_stroke_width if learned else t.box_stroke_width),
            **{
                "class": f"op{' learned' if learned else ''}",
                "data-node": str(box.node),
                "data-kind": box.kind,
            },
        )
        if box.learned:
            el.set("data-params", " ".join(box.learned))
        node = self.g.nodes[box.node]
        tip = f"{box.label}: [{node.op.core_text()}] over ({' '.join(a.name for a in box.loop)})"
        params = f"\nlearned: {', '.join(box.learned)}" if box.learned else ""
        # No build site here: the drawing depends on the canonical graph only (stable output).
        ET.SubElement(el, "title").text = f"{tip}{params}"
        self.text(
            self.labels,
            x + n.w / 2,
            y + t.font_size + 3,
            box.label,
            t.font_size,
            t.foreground,
            weight="bold" if learned else "normal",
            cls="op-label",
        )
        self.segments(n.ins, x, y, 0.0)
        self.segments(n.outs, x, y, n.w)
        self.inside(n, box, x, y)
        if kernel is not None and self.plan is not None:
            k = kernel[0]
            self.rect(
                self.weave,
                x - 3,
                y - 3,
                n.w + 6,
                n.h + 6,
                rx="6",
                fill="none",
                stroke=t.kernel_stroke,
                stroke_width="1.2",
                stroke_dasharray="4 2",
                **{"class": "kernel", "data-kernel": str(k)},
            )
            # Which kernel: ops sharing a tag share a launch (full name in the tooltip).
            self.text(
                self.labels,
                x + n.w + 3,
                y - 5,
                f"k{k}",
                t.label_size,
                t.kernel_stroke,
                anchor="end",
                weight="bold",
                cls="kernel-tag",
            )
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
            ET.SubElement(
                self.weave,
                "line",
                {
                    "x1": fmt(x + dx - 5),
                    "x2": fmt(x + dx + 5),
                    "y1": fmt(my),
                    "y2": fmt(my),
                    "stroke": self.t.foreground,
                    "stroke-width": "1.2",
                    "stroke-dasharray": "2 1.5",
                    "class": "segment",
                },
            )

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
                self.wire(
                    self.weave, [(x, y + py), where[a]], a, from_value[py], "wire contraction"
                )
        for dx, dy in dots:
            ET.SubElement(
                self.weave,
                "circle",
                {
                    "cx": fmt(dx),
                    "cy": fmt(dy),
                    "r": "3.2",
                    "fill": t.contraction_dot,
                    "class": "contraction-dot",
                },
            )
        drawn: set[Axis] = set()
        in_y = {a: py for p in n.ins for a, py in zip(p.axes, p.ys)}
        for p in n.ins:  # loop axes: every input carrying one weaves into the output
            for a, py in zip(p.axes, p.ys):
                if a in loop and a in out_port:
                    self.wire(
                        self.weave,
                        [(x, y + py), (x + n.w, y + out_port[a].y_of(a))],
                        a,
                        out_port[a].value,
                        "wire loop",
                        halo=True,
                    )
                    drawn.add(a)
        for a, b in box.through:  # kept or renamed core axes run straight through
            if a in in_y and b in out_port and b not in loop:
                self.wire(
                    self.weave,
                    [(x, y + in_y[a]), (x + n.w, y + out_port[b].y_of(b))],
                    b,
                    out_port[b].value,
                    "wire core",
                    halo=True,
                )
                drawn.add(b)
        if dots and box.learned:  # a learned map's new axes leave its weight's dot
            cx, cyy = dots[0]
            for p in n.outs:
                for a, py in zip(p.axes, p.ys):
                    if a not in drawn and a not in loop:
                        self.wire(
                            self.weave, [(cx, cyy), (x + n.w, y + py)], a, p.value, "wire core"
                        )
        glyph = GLYPHS.get(box.kind)  # an op's own picture (a window's frame of taps)
        if glyph is not None:
            glyph(self, n, box, x, y)

    def hexagon(self, cx: float, cy: float, label: str, axis: Axis, tip: str) -> None:
        r = 7.5
        pts = " ".join(
            f"{fmt(cx + r * dx)},{fmt(cy + r * dy)}"
            for dx, dy in ((1, 0), (0.5, 0.87), (-0.5, 0.87), (-1, 0), (-0.5, -0.87), (0.5, -0.87))
        )
        hexagon = ET.SubElement(
            self.weave,
            "polygon",
            {
                "points": pts,
                "fill": self.t.partition_fill,
                "stroke": self.t.axis_colour(axis),
                "stroke-width": "1.6",
                "class": "partition",
                "data-axis": axis.uid,
                "data-partition": label,
            },
        )
        ET.SubElement(hexagon, "title").text = tip
        self.text(self.weave, cx, cy + 3, label, 7.5, self.t.foreground, cls="partition-label")
