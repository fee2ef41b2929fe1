"""What ncd-diagram registers with the ncd plugin host: renderers, ``ncd draw``, a demo step.

Two renderers: ``diagram`` (native ``svg``, ``json``, ``dot`` text; it also serves notebooks'
``_repr_svg_``) and ``graphviz`` (``png``, ``pdf``, ``gv.svg`` through the ``dot`` program).
"""

from __future__ import annotations

import argparse
import os
import shutil
import sys
from typing import Any, ClassVar

from ncd.plugins.interfaces import Renderer

__all__ = ["DiagramRenderer", "GraphvizRenderer", "configure_draw", "demo_step", "run_draw"]

OPTIONS = ("depth", "repeat", "theme", "plan")


def _split(options: dict[str, Any]) -> tuple[dict[str, Any], bool, str]:
    """Diagram options apart from the render options ``legend`` and ``engine``."""
    from ncd_diagram.errors import DiagramError

    unknown = sorted(set(options) - {*OPTIONS, "legend", "engine"})
    if unknown:
        raise DiagramError(
            f"unknown diagram option(s) {', '.join(unknown)}; known: "
            f"{', '.join((*OPTIONS, 'legend', 'engine'))}"
        )
    legend = bool(options.pop("legend", False))
    return options, legend, str(options.pop("engine", "graphviz"))


class DiagramRenderer(Renderer):
    """Native drawing: SVG in the NCD style, diagram JSON, DOT text (no external program)."""

    name = "diagram"
    formats: ClassVar[tuple[str, ...]] = ("svg", "json", "dot")

    def render(self, model: Any, fmt: str, **options: Any) -> str | bytes:
        from ncd_diagram.diagram import Diagram

        opts, legend, engine = _split(dict(options))
        return Diagram(model, **opts).render(fmt, legend, engine)


class GraphvizRenderer(Renderer):
    """PNG/PDF (and Graphviz's own SVG as ``gv.svg``) through the ``dot`` program."""

    name = "graphviz"
    formats: ClassVar[tuple[str, ...]] = ("png", "pdf", "gv.svg")

    @staticmethod
    def available() -> bool:
        return shutil.which("dot") is not None

    def render(self, model: Any, fmt: str, **options: Any) -> str | bytes:
        from ncd_diagram.diagram import Diagram

        opts, legend, engine = _split(dict(options))
        return Diagram(model, **opts).render(fmt, legend, engine)


# -- ncd draw ---------------------------------------------------------------------------------
FORMATS = ("svg", "png", "pdf", "dot", "json", "gv.svg")


def configure_draw(p: argparse.ArgumentParser) -> None:
    from ncd.cli import add_model_arguments

    add_model_arguments(p)
    p.add_argument(
        "-o",
        "--output",
        help="file to write (format from its extension); default: print svg/dot/json to stdout",
    )
    p.add_argument("--format", choices=FORMATS, help="output format (default: from -o, else svg)")
    p.add_argument(
        "--depth",
        type=int,
        default=None,
        help="open named blocks down to this depth (0: top-level blocks closed); default: all open",
    )
    p.add_argument(
        "--no-repeat",
        action="store_true",
        help="draw every block of a repeated run instead of one box marked xN",
    )
    p.add_argument("--legend", action="store_true", help="add an axis legend")
    p.add_argument("--theme", help="light, dark, or a theme JSON file")
    p.add_argument(
        "--plan",
        choices=("fuse", "unfused"),
        help="draw a kernel schedule: ncd.fuse(model) or one kernel per op",
    )
    p.add_argument(
        "--engine",
        choices=("native", "graphviz"),
        default=None,
        help="how png/pdf are made: rasterise the native SVG (CairoSVG) or Graphviz's "
        "dot (default: native for png when CairoSVG works, else graphviz)",
    )


def _format(args: argparse.Namespace) -> str:
    if args.format:
        return str(args.format)
    if args.output:
        if args.output.endswith(".gv.svg"):
            return "gv.svg"
        ext = os.path.splitext(args.output)[1].lstrip(".").lower()
        return {"gv": "dot"}.get(ext, ext) if ext else "svg"
    return "svg"


def run_draw(args: argparse.Namespace) -> int:
    from ncd.cli import load_model
    from ncd_diagram.diagram import Diagram
    from ncd_diagram.errors import DiagramError, GraphvizNotFoundError

    fmt = _format(args)
    if fmt not in FORMATS:
        raise DiagramError(
            f"cannot tell the format of {args.output!r}; use --format with one of "
            f"{', '.join(FORMATS)}"
        )
    model = load_model(args.model, args.bind)
    d = Diagram(
        model,
        depth=args.depth,
        repeat=not args.no_repeat,
        theme=args.theme,
        plan=_plan(model, args.plan),
    )
    try:
        engine = args.engine or ("native" if fmt == "png" and _cairo() else "graphviz")
        data = d.render(fmt, args.legend, engine)
    except GraphvizNotFoundError as e:
        print(f"ncd draw: {e}", file=sys.stderr)
        if args.output:
            dot_path = os.path.splitext(args.output)[0] + ".dot"
            with open(dot_path, "w", encoding="utf-8") as f:
                f.write(e.dot)
            print(f"ncd draw: wrote the DOT text to {dot_path} instead", file=sys.stderr)
        return 3
    if not args.output:
        if isinstance(data, bytes):
            raise DiagramError(f"{fmt} is binary: give -o FILE")
        sys.stdout.write(data)
        return 0
    with open(args.output, "wb") as f:
        f.write(data if isinstance(data, bytes) else data.encode("utf-8"))
    print(f"wrote {args.output} ({fmt}, {len(data):,} bytes)")
    return 0


def _plan(model: Any, how: str | None) -> Any:
    if how is None:
        return None
    import ncd
    from ncd.kernel import unfused
    from ncd_diagram.errors import DiagramError

    if how == "unfused":
        return unfused(model)
    fuse = getattr(ncd, "fuse", None)
    if fuse is None:
        raise DiagramError("this ncd-core has no ncd.fuse; use --plan unfused")
    return fuse(model)


def _cairo() -> bool:
    try:
        import cairosvg  # noqa: F401
    except (ImportError, OSError):
        return False
    return True


# -- ncd demo ---------------------------------------------------------------------------------
def demo_step(ctx: dict[str, Any]) -> None:
    """Write the transformer's diagram (collapsed GPT, one open block, JSON) into ``ctx["out"]``."""
    from ncd_diagram.diagram import Diagram
    from ncd_diagram.dot import pipe
    from ncd_diagram.errors import GraphvizNotFoundError

    model, out = ctx["model"], ctx["out"]
    written = []
    d = Diagram(model)
    for name, text in (
        ("gpt.svg", d.to_svg(legend=True)),
        ("gpt.diagram.json", d.to_json()),
        ("gpt_top.svg", Diagram(model, depth=0).to_svg(legend=True)),
        ("gpt.dot", d.to_dot()),
    ):
        path = os.path.join(out, name)
        with open(path, "w", encoding="utf-8") as f:
            f.write(text)
        written.append(path)
    try:
        path = os.path.join(out, "gpt_graphviz.png")
        with open(path, "wb") as f:
            f.write(pipe(Diagram(model, depth=1).to_dot(), "png"))
        written.append(path)
    except GraphvizNotFoundError:
        print("  (Graphviz's dot is not installed: skipped gpt_graphviz.png)")
    n_items = sum(1 for _ in _items(d.root))
    print(f"  {len(model.graph.nodes)} ops drawn as {n_items} boxes (repeated blocks folded xN)")
    for path in written:
        print(f"  wrote {path} ({os.path.getsize(path):,} bytes)")
    ctx["diagram"] = written[0]


def _items(block: Any) -> Any:
    from ncd_diagram.structure import Block, Repeat

    for c in block.children:
        yield c
        body = c.body if isinstance(c, Repeat) else c
        if isinstance(body, Block) and body.open:
            yield from _items(body)
