"""Shared models and helpers for the ncd-diagram tests (imported by name: tests/ has no
packages)."""

from __future__ import annotations

import shutil
import xml.etree.ElementTree as ET
from pathlib import Path

import ncd
from ncd import ops

ROOT = Path(__file__).resolve().parents[2]
ARTIFACTS = ROOT / "artifacts" / "diagrams"
SVG = "{http://www.w3.org/2000/svg}"

HAS_DOT = shutil.which("dot") is not None


def attention() -> ncd.Term:
    return ops.einsum("q d, x d -> q x") >> ops.softmax("x") >> ops.einsum("q x, x v -> q v")


def parse(svg: str) -> ET.Element:
    """Parse SVG text (fails the test on malformed XML)."""
    return ET.fromstring(svg)


def elements(root: ET.Element, tag: str, cls: str | None = None) -> list[ET.Element]:
    """Descendants with ``tag`` whose class list contains ``cls``."""
    out = []
    for el in root.iter(SVG + tag):
        if cls is None or cls in (el.get("class") or "").split():
            out.append(el)
    return out


def texts(root: ET.Element) -> list[str]:
    return [el.text or "" for el in root.iter(SVG + "text")]


def cairo_available() -> tuple[bool, str]:
    try:
        import cairosvg  # noqa: F401
    except (ImportError, OSError) as e:
        return False, f"CairoSVG or the cairo library is missing: {e}"
    return True, ""
