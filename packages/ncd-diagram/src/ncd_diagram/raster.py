"""Rasterise the native SVG to PNG or PDF with CairoSVG (needs the system cairo library)."""

from __future__ import annotations

from ncd_diagram.errors import DiagramError

__all__ = ["rasterise", "svg_to_png"]


def svg_to_png(svg: str, scale: float = 1.5) -> bytes:
    """PNG bytes of an SVG document, drawn by CairoSVG at ``scale``."""
    return rasterise(svg, "png", scale)


def rasterise(svg: str, fmt: str = "png", scale: float = 1.5) -> bytes:
    """``png`` or ``pdf`` bytes of an SVG document, drawn by CairoSVG."""
    try:
        import cairosvg
    except (ImportError, OSError) as e:  # OSError: the cairo shared library is missing
        raise DiagramError(
            f"rasterising the native SVG needs CairoSVG and the cairo library ({e}). Fix: pip "
            "install cairosvg and apt-get install libcairo2, or render png through Graphviz "
            "(format 'png' with engine 'graphviz')."
        ) from e
    convert = {"png": cairosvg.svg2png, "pdf": cairosvg.svg2pdf}[fmt]
    return bytes(convert(bytestring=svg.encode("utf-8"), scale=scale))
