"""``ncd_diagram.diagram(model)``: the item tree, its layout, and every output format.

A ``Diagram`` is built once per (model, options) and renders itself as diagram JSON (the
layout-free tree plus the computed layout), native SVG, DOT text, or PNG/PDF. ``draw`` and
``save`` are one-call shortcuts.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from typing import Any

from ncd.graph import Graph, Model
from ncd.kernel import FusionPlan
from ncd_diagram.errors import DiagramError
from ncd_diagram.kernels import PlanView
from ncd_diagram.layout import Layout, layout, route_points, walk
from ncd_diagram.structure import Block, Item, OpBox, Repeat, build
from ncd_diagram.theme import Theme, resolve_theme

__all__ = ["ENGINES", "FORMAT", "FORMATS", "VERSION", "Diagram", "diagram", "draw", "save"]

FORMAT = "ncd-diagram"
VERSION = 1
FORMATS = ("svg", "json", "dot", "png", "pdf", "gv.svg")
ENGINES = ("graphviz", "native")


def _graph_of(model: Any) -> Graph:
    if isinstance(model, Graph):
        return model
    if isinstance(model, Model):
        return model.graph
    raise DiagramError(f"expected an ncd model (a Term or Graph), got {type(model).__name__}")


class Diagram:
    """A model's diagram: ``root`` (the item tree), ``layout``, and the renderers."""

    def __init__(
        self,
        model: Any,
        *,
        depth: int | None = None,
        repeat: bool = True,
        theme: Theme | Mapping[str, Any] | str | None = None,
        plan: FusionPlan | None = None,
    ) -> None:
        if depth is not None and (
            isinstance(depth, bool) or not isinstance(depth, int) or depth < 0
        ):
            raise DiagramError(
                f"depth must be None (everything open) or an int >= 0, got {depth!r}"
            )
        self.graph = _graph_of(model)
        self.depth, self.repeat = depth, repeat
        self.theme = resolve_theme(theme)
        self.plan = None if plan is None else PlanView(self.graph, plan)
        self.root: Block = build(self.graph, depth, repeat)
        self._layout: Layout | None = None

    @property
    def title(self) -> str:
        root = self.graph.scopes[0]
        return root.label or root.name

    @property
    def layout(self) -> Layout:
        if self._layout is None:
            self._layout = layout(self.graph, self.root, self.theme)
        return self._layout

    # -- formats -----------------------------------------------------------------------------------
    def to_svg(self, legend: bool = False) -> str:
        from ncd_diagram.svg import to_svg

        return to_svg(self.graph, self.layout, self.theme, self.title, legend, self.plan)

    def to_dot(self, legend: bool = False) -> str:
        from ncd_diagram.dot import to_dot

        return to_dot(self, legend)

    def to_dict(self, with_layout: bool = True) -> dict[str, Any]:
        """The diagram JSON (format ``ncd-diagram``, version 1; see docs/diagram.md)."""
        g = self.graph
        out: dict[str, Any] = {
            "format": FORMAT,
            "version": VERSION,
            "title": self.title,
            "options": {"depth": self.depth, "repeat": self.repeat},
            "axes": [
                {"uid": a.uid, "name": a.name, "size": a.size, "colour": a.colour} for a in g.axes
            ],
            "values": [
                {"id": v, "axes": [a.uid for a in t.axes], "dtype": t.dtype}
                for v, t in enumerate(g.values)
            ],
            "inputs": list(g.inputs),
            "outputs": list(g.outputs),
            "root": _item_dict(self.root),
            "kernels": None if self.plan is None else self.plan.to_dict(),
        }
        if with_layout:
            out["layout"] = self._layout_dict()
        return out

    def to_json(self, indent: int | None = 1, with_layout: bool = True) -> str:
        import json

        return json.dumps(self.to_dict(with_layout), indent=indent, sort_keys=False)

    def _layout_dict(self) -> dict[str, Any]:
        lay = self.layout
        boxes: dict[str, Any] = {}
        wires: list[dict[str, Any]] = []
        layouts = [(lay, 0.0, 0.0)]
        for _, n, x, y, _ in walk(lay):
            assert n.item is not None
            boxes[n.item.id] = {"x": _r2(x), "y": _r2(y), "w": _r2(n.w), "h": _r2(n.h)}
            if n.inner is not None:
                layouts.append((n.inner, x + n.inner_dx, y + n.inner_dy))
        for sub, ox, oy in layouts:
            for r in sub.routes:
                for a in sub.nodes[r.src[0]].outs[r.src[1]].axes:
                    wires.append(
                        {
                            "value": r.value,
                            "axis": a.uid,
                            "points": [
                                [_r2(px), _r2(py)] for px, py in route_points(sub, r, a, ox, oy)
                            ],
                        }
                    )
        return {"width": _r2(lay.w), "height": _r2(lay.h), "boxes": boxes, "wires": wires}

    def render(
        self, fmt: str = "svg", legend: bool = False, engine: str = "graphviz"
    ) -> str | bytes:
        """``svg`` (native), ``json``, ``dot`` (text), ``png``/``pdf`` (by ``engine``:
        ``graphviz``, through the ``dot`` program, or ``native``, the native SVG rasterised by
        CairoSVG), or Graphviz's own SVG as ``gv.svg``."""
        if fmt == "svg":
            return self.to_svg(legend)
        if fmt == "json":
            return self.to_json()
        if fmt == "dot":
            return self.to_dot(legend)
        if engine not in ENGINES:
            raise DiagramError(f"unknown engine {engine!r}; known: {', '.join(ENGINES)}")
        if fmt in ("png", "pdf") and engine == "native":
            from ncd_diagram.raster import rasterise

            return rasterise(self.to_svg(legend), fmt)
        if fmt in ("png", "pdf", "gv.svg"):
            from ncd_diagram.dot import pipe

            return pipe(self.to_dot(legend), "svg" if fmt == "gv.svg" else fmt)
        raise DiagramError(f"unknown diagram format {fmt!r}; known: {', '.join(FORMATS)}")


def _item_dict(item: Item) -> dict[str, Any]:
    base = {"id": item.id, "label": item.label, "inputs": item.inputs, "outputs": item.outputs}
    if isinstance(item, OpBox):
        return {
            **base,
            "type": "op",
            "node": item.node,
            "kind": item.kind,
            "category": item.category,
            "learned": bool(item.learned),
            "params": list(item.learned),
            "loop": [a.uid for a in item.loop],
            "core_in": [[a.uid for a in g] for g in item.core_in],
            "core_out": [[a.uid for a in g] for g in item.core_out],
            "contracted": [a.uid for a in item.contracted],
        }
    if isinstance(item, Repeat):
        return {
            **base,
            "type": "repeat",
            "count": item.count,
            "scopes": [b.scope for b in item.blocks],
            "labels": [b.scope_label for b in item.blocks],
            "body": _item_dict(item.body),
        }
    assert isinstance(item, Block)
    return {
        **base,
        "type": "block",
        "scope": item.scope,
        "name": item.name,
        "scope_label": item.scope_label,
        "open": item.open,
        "children": [_item_dict(c) for c in item.children] if item.open else [],
    }


def diagram(model: Any, **options: Any) -> Diagram:
    """The diagram of ``model`` (options: ``depth``, ``repeat``, ``theme``, ``plan``)."""
    return Diagram(model, **options)


def draw(
    model: Any, fmt: str = "svg", *, legend: bool = False, engine: str = "graphviz", **options: Any
) -> str | bytes:
    """Render ``model`` in one call: ``draw(gpt, "svg", depth=1, legend=True)``."""
    return Diagram(model, **options).render(fmt, legend, engine)


def save(
    model: Any,
    path: str | os.PathLike[str],
    fmt: str | None = None,
    *,
    legend: bool = False,
    engine: str = "graphviz",
    **options: Any,
) -> str:
    """Write a diagram file; the format defaults to the file extension. Returns the path."""
    path = os.fspath(path)
    if fmt is None:
        fmt = (
            "gv.svg" if path.endswith(".gv.svg") else os.path.splitext(path)[1].lstrip(".").lower()
        )
        fmt = {"gv": "dot"}.get(fmt, fmt)
    data = draw(model, fmt, legend=legend, engine=engine, **options)
    with open(path, "wb") as f:
        f.write(data if isinstance(data, bytes) else data.encode("utf-8"))
    return path


def _r2(v: float) -> float:
    return round(v, 2)
