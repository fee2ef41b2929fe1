"""DOT text for Graphviz, from the same item tree as the native drawing.

Ops and closed blocks are nodes, open blocks are clusters, a repeat is a cluster (or node) marked
xN drawn once; each value is an edge whose colour list draws one parallel line per axis (in the
axis colours) and whose label names the axes. ``pipe`` renders DOT to PNG/PDF/SVG through the
``graphviz`` package and raises ``GraphvizNotFoundError`` (carrying the DOT text) without ``dot``.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from ncd.graph import Graph
from ncd_diagram.errors import GraphvizNotFoundError
from ncd_diagram.structure import TIMES, Block, Item, OpBox, Repeat

if TYPE_CHECKING:
    from ncd_diagram.diagram import Diagram

__all__ = ["pipe", "printable", "quote", "to_dot"]


def printable(text: str, keep: str = "") -> str:
    """``text`` with every character XML 1.0 and DOT cannot carry (control characters but those
    in ``keep``, lone surrogates, U+FFFE/U+FFFF) replaced by U+FFFD. ncd refuses such names at
    construction; this keeps any output valid even so."""
    return "".join(
        "\ufffd"
        if (ord(ch) < 32 and ch not in keep)
        or 0xD800 <= ord(ch) <= 0xDFFF
        or ord(ch) in (0x7F, 0xFFFE, 0xFFFF)
        else ch
        for ch in text
    )


def quote(text: str) -> str:
    """A DOT string literal (quotes, backslashes and newlines escaped)."""
    text = printable(text, keep="\n")
    return '"' + text.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n") + '"'


def _axes_label(graph: Graph, value: int) -> str:
    return " ".join(
        a.name if a.size is None else f"{a.name}={a.size}" for a in graph.values[value].axes
    )


class _Writer:
    def __init__(self, d: Diagram) -> None:
        self.d, self.g, self.t = d, d.graph, d.theme
        self.lines: list[str] = []
        self.owner: dict[int, str] = {}  # value id -> DOT node producing it
        self.consumers: list[tuple[str, int]] = []  # (DOT node, value) for visible inputs

    def emit(self, depth: int, text: str) -> None:
        self.lines.append("  " * depth + text)

    def item(self, item: Item, depth: int) -> None:
        t = self.t
        if isinstance(item, OpBox):
            name = f"n{item.node}"
            attrs = {
                "label": item.label
                + (f"\nover {', '.join(a.name for a in item.loop)}" if item.loop else ""),
                "shape": "box",
                "style": "rounded,filled",
                "fillcolor": t.learned_fill if item.learned else t.box_fill,
                "color": t.learned_stroke if item.learned else t.box_stroke,
                "penwidth": str(t.learned_stroke_width if item.learned else t.box_stroke_width),
            }
            plan = self.d.plan
            if plan is not None and plan.kernel_of(item.node) is not None:
                _, kname = plan.kernel_of(item.node) or (0, "")
                parts = " ".join(
                    f"\u2b21{lab}:{a.name}" for a, lab, _ in plan.partitions_of(item.node)
                )
                attrs["label"] += f"\n{kname}" + (f" {parts}" if parts else "")
                attrs["color"] = t.kernel_stroke
            self.emit(depth, f"{name} [{_attrs(attrs)}];")
            self.node_io(name, item)
            return
        if isinstance(item, Repeat):
            body = item.body
            # Drawn once: the last block's outputs leave from the first block's producers.
            last = dict(zip(item.blocks[-1].outputs, body.outputs, strict=True))
            self.block(body, depth, f"{item.label} {TIMES}{item.count}", last)
            return
        assert isinstance(item, Block)
        self.block(item, depth, item.label, None)

    def block(self, b: Block, depth: int, label: str, exits: dict[int, int] | None) -> None:
        t = self.t
        if not b.open:
            name = f"s{b.scope}"
            style = {
                "label": label,
                "shape": "box3d",
                "style": "filled",
                "fillcolor": t.block_fill,
                "color": t.block_stroke,
                "fontcolor": t.block_title,
            }
            self.emit(depth, f"{name} [{_attrs(style)}];")
            self.node_io(name, b)
            if exits:
                for v in exits:
                    self.owner[v] = name
            return
        self.emit(depth, f"subgraph cluster_s{b.scope} {{")
        self.emit(
            depth + 1,
            _attrs(
                {
                    "label": label,
                    "style": "rounded,filled",
                    "fillcolor": t.block_fill if depth % 2 else t.block_fill_alt,
                    "color": t.block_stroke,
                    "fontcolor": t.block_title,
                },
                sep=";\n" + "  " * (depth + 1),
            )
            + ";",
        )
        for c in b.children:
            self.item(c, depth + 1)
        self.emit(depth, "}")
        if exits:
            for v, v0 in exits.items():
                self.owner[v] = self.owner.get(v0, "")

    def node_io(self, name: str, item: Item) -> None:
        for v in item.outputs:
            self.owner[v] = name
        for v in item.inputs:
            self.consumers.append((name, v))


def _attrs(attrs: dict[str, str], sep: str = ", ") -> str:
    return sep.join(f"{k}={quote(str(v))}" for k, v in attrs.items())


def to_dot(d: Diagram, legend: bool = False) -> str:
    """The diagram as DOT text (left to right; clusters for open definitions)."""
    g, t = d.graph, d.theme
    w = _Writer(d)
    w.emit(0, f"digraph {quote(d.title)} {{")
    w.emit(
        1,
        f"graph [rankdir=LR, compound=true, bgcolor={quote(t.background)}, "
        f"fontname={quote(t.font_family.split(',')[0])}, fontcolor={quote(t.foreground)}, "
        f"label={quote(d.title)}, labelloc=t, nodesep=0.25, ranksep=0.45];",
    )
    w.emit(
        1,
        f"node [fontname={quote(t.font_family.split(',')[0])}, fontsize={t.font_size:g}, "
        f"fontcolor={quote(t.foreground)}];",
    )
    w.emit(
        1,
        f"edge [fontname={quote(t.font_family.split(',')[0])}, fontsize={t.label_size:g}, "
        f"arrowhead=none];",
    )
    for k, v in enumerate(g.inputs):
        w.emit(1, f"in{k} [label={quote('input ' + str(k))}, shape=plaintext];")
        w.owner[v] = f"in{k}"
    for c in d.root.children:
        w.item(c, 1)
    for k, v in enumerate(g.outputs):
        w.emit(1, f"out{k} [label={quote('output ' + str(k))}, shape=plaintext];")
        w.consumers.append((f"out{k}", v))
    for name, v in w.consumers:  # one edge per use: x * x draws two wires into mul
        src = w.owner.get(v)
        if not src:
            continue
        axes = g.values[v].axes
        colours = ":".join(t.axis_colour(a) for a in axes) or t.foreground
        style = ""
        if d.plan is not None and d.plan.memory_level(v) == 0:
            style = ", penwidth=2"
        w.emit(
            1,
            f"{src} -> {name} [color={quote(colours)}, label={quote(_axes_label(g, v))}, "
            f"fontcolor={quote(t.axis_colour(axes[0]) if axes else t.foreground)}{style}];",
        )
    if legend:
        rows = "".join(
            f'<tr><td bgcolor="{t.axis_colour(a)}">   </td><td align="left">{_html(a.name)} '
            f"#{a.uid} {'free' if a.size is None else a.size}</td></tr>"
            for a in g.axes
        )
        w.emit(
            1,
            f'legend [shape=plaintext, label=<<table border="0" cellspacing="2">'
            f'<tr><td colspan="2"><b>axes</b></td></tr>{rows}</table>>];',
        )
    w.emit(0, "}")
    return "\n".join(w.lines) + "\n"


def _html(text: str) -> str:
    text = printable(text)
    return (
        text.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;").replace('"', "&quot;")
    )


def pipe(dot: str, fmt: str) -> bytes:
    """Render DOT text with Graphviz's ``dot`` (``png``, ``pdf``, ``svg``)."""
    import graphviz

    try:
        return bytes(graphviz.Source(dot).pipe(format=fmt))
    except graphviz.ExecutableNotFound as e:
        raise GraphvizNotFoundError(
            f"Graphviz's `dot` program is not installed, so {fmt} cannot be rendered ({e}). "
            "Fix: install Graphviz (Debian/Ubuntu: apt-get install graphviz; macOS: brew install "
            "graphviz), or use format 'svg' (native drawing, no Graphviz needed) or 'dot' for the "
            "DOT text, which this error also carries as .dot.",
            dot,
        ) from e
