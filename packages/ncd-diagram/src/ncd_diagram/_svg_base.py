"""The SVG canvas: drawing layers and primitives shared by the op and block painters.

Every wire is one ``<path>`` per axis in the axis's (themed) colour, tagged with ``data-axis``
and ``data-value``; text and attribute values go through ``xml.etree``, which escapes them.
"""

from __future__ import annotations

import xml.etree.ElementTree as ET

from ncd.axis import Axis
from ncd.graph import Graph
from ncd_diagram.kernels import PlanView
from ncd_diagram.theme import Theme

__all__ = ["SVG_NS", "CanvasBase", "axis_text", "fmt", "path"]

SVG_NS = "http://www.w3.org/2000/svg"


def fmt(v: float) -> str:
    return f"{v:.1f}".rstrip("0").rstrip(".")


def axis_text(a: Axis) -> str:
    """``name size`` for a bound axis, ``name`` for a free one."""
    return a.name if a.size is None else f"{a.name} {a.size}"


def path(points: list[tuple[float, float]]) -> str:
    """Horizontal-tangent cubic segments through ``points`` (smooth at every bend)."""
    (x0, y0), rest = points[0], points[1:]
    d = [f"M{fmt(x0)},{fmt(y0)}"]
    for x1, y1 in rest:
        if abs(y1 - y0) < 0.05:
            d.append(f"L{fmt(x1)},{fmt(y1)}")
        else:
            mx = (x0 + x1) / 2
            d.append(f"C{fmt(mx)},{fmt(y0)} {fmt(mx)},{fmt(y1)} {fmt(x1)},{fmt(y1)}")
        x0, y0 = x1, y1
    return " ".join(d)


class CanvasBase:
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
    def text(
        self,
        parent: ET.Element,
        x: float,
        y: float,
        text: str,
        size: float,
        fill: str,
        anchor: str = "middle",
        weight: str = "normal",
        cls: str = "label",
    ) -> None:
        el = ET.SubElement(
            parent,
            "text",
            {
                "x": fmt(x),
                "y": fmt(y),
                "font-size": fmt(size),
                "fill": fill,
                "text-anchor": anchor,
                "font-weight": weight,
                "class": cls,
            },
        )
        el.text = text

    def rect(
        self, parent: ET.Element, x: float, y: float, w: float, h: float, **attrs: str
    ) -> ET.Element:
        base = {"x": fmt(x), "y": fmt(y), "width": fmt(w), "height": fmt(h)}
        return ET.SubElement(
            parent, "rect", {**base, **{k.replace("_", "-"): v for k, v in attrs.items()}}
        )

    def wire(
        self,
        parent: ET.Element,
        points: list[tuple[float, float]],
        axis: Axis,
        value: int,
        cls: str,
        halo: bool = False,
    ) -> None:
        self.used.setdefault(axis.uid, axis)
        d = path(points)
        if halo:
            ET.SubElement(
                parent,
                "path",
                {
                    "d": d,
                    "fill": "none",
                    "stroke": self.t.wire_halo,
                    "stroke-width": fmt(self.t.wire_width + 3),
                    "class": "halo",
                },
            )
        ET.SubElement(
            parent,
            "path",
            {
                "d": d,
                "fill": "none",
                "stroke": self.t.axis_colour(axis),
                "stroke-width": fmt(self.t.wire_width),
                "class": cls,
                "data-axis": axis.uid,
                "data-value": str(value),
            },
        )
