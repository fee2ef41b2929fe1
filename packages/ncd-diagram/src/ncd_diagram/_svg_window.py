"""The sliding-window glyph: the input axis enters a frame of taps (one tick per kernel
offset, spaced by the dilation) and leaves as two wires, the positions and the offsets; its
tooltip writes the index relation ``x[o*stride + j*dilation - padding]``."""

from __future__ import annotations

import xml.etree.ElementTree as ET
from collections.abc import Callable
from typing import Any

from ncd.primitives.window import Window
from ncd_diagram._svg_base import CanvasBase, fmt
from ncd_diagram.layout import Placed
from ncd_diagram.structure import OpBox

__all__ = ["GLYPHS"]

#: most ticks drawn in a frame (a longer kernel shows its first ones and its length in words)
MAX_TICKS = 7


def relation(op: Window) -> str:
    """``y[o, j] = x[o*s + j*d - p]`` with the op's axis names and numbers."""
    o, j = op.out.name, op.k.name
    terms = [o if op.stride == 1 else f"{o}*{op.stride}"]
    terms.append(j if op.dilation == 1 else f"{j}*{op.dilation}")
    idx = " + ".join(terms) + (f" - {op.padding}" if op.padding else "")
    return f"y[{o}, {j}] = {op.axis.name}[{idx}]" + (f", {op.fill:g} outside" if op.padding else "")


def _window(c: CanvasBase, n: Placed, box: OpBox, x: float, y: float) -> None:
    op = c.g.nodes[box.node].op
    if not isinstance(op, Window):
        return
    in_y = next((y + p.y_of(op.axis) for p in n.ins if op.axis in p.axes and p.ys), None)
    outs = [(p, a) for p in n.outs if p.ys for a in p.axes if a in (op.out, op.k)]
    if in_y is None or not outs:
        return
    fx = x + n.w * 0.42  # the frame, where the input axis splits
    c.wire(c.weave, [(x, in_y), (fx, in_y)], op.axis, n.ins[0].value, "wire window")
    for p, a in outs:
        c.wire(c.weave, [(fx + 12, in_y), (x + n.w, y + p.y_of(a))], a, p.value, "wire window")
    k = op.k.size if isinstance(op.k.size, int) else 3
    ticks = min(k, MAX_TICKS)
    step = 2.0 * min(op.dilation, 3)
    width = max(12.0, step * (ticks - 1) + 6)
    frame = c.rect(
        c.weave,
        fx,
        in_y - 5,
        width,
        10,
        rx="2",
        fill=c.t.box_fill,
        stroke=c.t.foreground,
        stroke_width="1.1",
        **{"class": "window", "data-node": str(box.node)},
    )
    ET.SubElement(frame, "title").text = (
        f"{relation(op)}; {op.k.name}={k} stride={op.stride} padding={op.padding} "
        f"dilation={op.dilation}"
    )
    for t in range(ticks):
        tx = fx + 3 + t * step
        ET.SubElement(
            c.weave,
            "line",
            {
                "x1": fmt(tx),
                "x2": fmt(tx),
                "y1": fmt(in_y - 3),
                "y2": fmt(in_y + 3),
                "stroke": c.t.foreground,
                "stroke-width": "1",
                "class": "window-tap",
            },
        )


#: op kind -> a glyph drawn inside its box, over the wires ``OpPainter.inside`` draws.
GLYPHS: dict[str, Callable[[Any, Placed, OpBox, float, float], None]] = {"window": _window}
