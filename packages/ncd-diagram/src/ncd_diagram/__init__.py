"""ncd-diagram: neural circuit diagrams (SVG, DOT, JSON) drawn from ncd models.

    import ncd, ncd_diagram
    svg = ncd_diagram.draw(ncd.nn.gpt(layers=12), "svg", depth=2, legend=True)
    ncd_diagram.save(model, "gpt.png")          # png/pdf through Graphviz's dot
    ncd_diagram.diagram(model).to_json()        # the layout-free tree plus the layout

No server, no browser: the SVG is written here, PNG/PDF come from Graphviz (or ``svg_to_png``
rasterises the native SVG with CairoSVG).
"""

from ncd_diagram.diagram import FORMAT, FORMATS, VERSION, Diagram, diagram, draw, save
from ncd_diagram.errors import DiagramError, GraphvizNotFoundError
from ncd_diagram.raster import svg_to_png
from ncd_diagram.theme import DARK, LIGHT, Theme

__all__ = [
    "DARK",
    "FORMAT",
    "FORMATS",
    "LIGHT",
    "VERSION",
    "Diagram",
    "DiagramError",
    "GraphvizNotFoundError",
    "Theme",
    "diagram",
    "draw",
    "save",
    "svg_to_png",
]
