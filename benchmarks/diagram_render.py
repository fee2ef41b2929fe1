"""Render GPTs of 6-48 layers fully expanded (no xN folding): the native SVG path should take
seconds, not minutes, at 48 layers. Graphviz's ``dot`` on the same diagram is the peer.

Run: python benchmarks/diagram_render.py [--no-graphviz]
"""

from __future__ import annotations

import shutil
import sys
import time

import ncd
import ncd_diagram as nd


def _time(fn):  # one run: these are seconds-scale, whole-pipeline timings
    t0 = time.perf_counter()
    out = fn()
    return time.perf_counter() - t0, out


def main() -> None:
    graphviz = shutil.which("dot") is not None and "--no-graphviz" not in sys.argv
    print(
        f"{'layers':>6} {'ops':>5} {'boxes+layout s':>15} {'svg s':>7} {'svg MB':>7} "
        f"{'json s':>7} {'dot text s':>10} {'graphviz svg s':>15} {'graphviz/native':>16}"
    )
    for layers in (6, 12, 24, 48):
        model = ncd.nn.gpt(layers=layers).bind(
            seq=1024, d_model=768, heads=12, d_head=64, d_ff=3072, vocab=50257
        )
        _ = model.graph  # lowering is ncd-core's cost, not the diagram's
        t_lay, d = _time(lambda m=model: _laid_out(m))
        t_svg, svg = _time(d.to_svg)
        t_json, _ = _time(d.to_json)
        t_dot, dot = _time(d.to_dot)
        native = t_lay + t_svg
        if graphviz:
            from ncd_diagram.dot import pipe

            t_gv, _ = _time(lambda text=dot: pipe(text, "svg"))
            gv, ratio = f"{t_gv:>15.2f}", f"{t_gv / native:>15.1f}x"
        else:
            gv, ratio = f"{'(no dot)':>15}", f"{'-':>16}"
        print(
            f"{layers:>6} {len(model.graph.nodes):>5} {t_lay:>15.3f} {t_svg:>7.3f} "
            f"{len(svg) / 1e6:>7.2f} {t_json:>7.3f} {t_dot:>10.3f} {gv} {ratio}"
        )


def _laid_out(model: ncd.Term) -> nd.Diagram:
    d = nd.diagram(model, repeat=False)
    _ = d.layout  # computed lazily: time it here
    return d


if __name__ == "__main__":
    main()
