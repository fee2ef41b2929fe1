"""Rasterise the native SVG to PNG with CairoSVG (needs the system cairo library)."""

from __future__ import annotations

from ncd_diagram.errors import DiagramError

__all__ = ["svg_to_png"]


def svg_to_png(svg: str, scale: float = 1.5) -> bytes:
    """PNG bytes of an SVG document, drawn by CairoSVG at ``scale``."""
    try:
        import cairosvg
    except (ImportError, OSError) as e:  # OSError: the cairo shared library is missing
        raise DiagramError(
            f"rasterising the native SVG needs CairoSVG and the cairo library ({e}). Fix: pip "
            "install cairosvg and apt-get install libcairo2, or render png through Graphviz "
            "(format 'png' with engine 'graphviz')."
        ) from e
    return bytes(cairosvg.svg2png(bytestring=svg.encode("utf-8"), scale=scale))
