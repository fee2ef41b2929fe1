"""Themes ("texture packs"): every colour, font and stroke width a diagram uses, as data.

A theme is a frozen value; ``Theme.from_dict`` / ``Theme.from_json`` load one from plain data
(unknown keys are rejected with the list of known ones), ``Theme.dark()`` is the dark preset.
Axis colours are not part of a theme: they come from the axis uid (``Axis.colour``) so the same
axis has the same colour in every drawing.
"""

from __future__ import annotations

import colorsys
import json
from collections.abc import Mapping
from typing import Any

import attrs

from ncd.axis import Axis
from ncd_diagram.errors import DiagramError

__all__ = ["DARK", "LIGHT", "Theme"]


def _tuple_str(value: Any) -> tuple[str, ...]:
    return tuple(str(v) for v in value)


@attrs.frozen
class Theme:
    """Colours, fonts and geometry of a diagram; restyle by passing another theme."""

    name: str = "light"
    dark: bool = False
    background: str = "#ffffff"
    foreground: str = "#1f2328"
    muted: str = "#6e7781"
    font_family: str = "DejaVu Sans, Helvetica, Arial, sans-serif"
    font_size: float = 12.0
    label_size: float = 8.5
    # op boxes
    box_fill: str = "#f6f8fa"
    box_stroke: str = "#57606a"
    box_stroke_width: float = 1.2
    learned_fill: str = "#fff8c5"
    learned_stroke: str = "#1f2328"
    learned_stroke_width: float = 2.8
    contraction_dot: str = "#1f2328"
    # named blocks (definitions)
    block_fill: str = "#dbe9ff"
    block_fill_alt: str = "#eef5ff"
    block_stroke: str = "#54aeff"
    block_stroke_width: float = 1.0
    block_title: str = "#0550ae"
    repeat_badge: str = "#cf222e"
    # wires
    wire_width: float = 1.8
    wire_gap: float = 9.0
    wire_halo: str = "#ffffff"
    segment_gap: float = 10.0
    # geometry
    layer_gap: float = 64.0
    row_gap: float = 22.0
    padding: float = 16.0
    # kernel schedules: one colour per memory level (0 = outermost, e.g. global memory)
    memory_levels: tuple[str, ...] = attrs.field(
        default=("#d0d7de", "#a5d6ff", "#aceebb", "#ffd8b5"), converter=_tuple_str
    )
    kernel_stroke: str = "#8250df"
    partition_fill: str = "#ffffff"
    # None draws Axis.colour as is; a lightness in (0, 1) keeps each axis's hue but sets its
    # lightness (the dark preset lifts wires off a dark background)
    axis_lightness: float | None = None

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> Theme:
        """A theme from plain data; keys missing from ``data`` keep the light defaults, and
        ``"base": "dark"`` starts from the dark preset instead."""
        data = dict(data)
        base = data.pop("base", "light")
        if base not in PRESETS:
            raise DiagramError(f"unknown base theme {base!r}; known: {', '.join(PRESETS)}")
        known = {f.name for f in attrs.fields(cls)}
        unknown = sorted(set(data) - known)
        if unknown:
            raise DiagramError(
                f"unknown theme key(s) {', '.join(unknown)}; known keys: {', '.join(sorted(known))}"
            )
        try:
            return attrs.evolve(PRESETS[base], **data)
        except (TypeError, ValueError) as e:
            raise DiagramError(f"invalid theme value: {e}") from e

    @classmethod
    def from_json(cls, text: str | bytes) -> Theme:
        """A theme from JSON text (an object of theme keys)."""
        try:
            data = json.loads(text)
        except json.JSONDecodeError as e:
            raise DiagramError(f"theme JSON is not valid JSON: {e}") from e
        if not isinstance(data, dict):
            raise DiagramError("theme JSON must be an object of theme keys")
        return cls.from_dict(data)

    @classmethod
    def dark_preset(cls) -> Theme:
        return DARK

    def to_dict(self) -> dict[str, Any]:
        out = attrs.asdict(self)
        out["memory_levels"] = list(self.memory_levels)
        return out

    def axis_colour(self, axis: Axis) -> str:
        """The colour of an axis's wires: its uid hue, at this theme's lightness."""
        if self.axis_lightness is None:
            return axis.colour
        rgb = [int(axis.colour[i : i + 2], 16) / 255 for i in (1, 3, 5)]
        h, _, sat = colorsys.rgb_to_hls(*rgb)
        r, g, b = colorsys.hls_to_rgb(h, self.axis_lightness, sat)
        return f"#{round(r * 255):02x}{round(g * 255):02x}{round(b * 255):02x}"

    def memory_colour(self, level: int) -> str:
        return self.memory_levels[min(level, len(self.memory_levels) - 1)]


LIGHT = Theme()
DARK = attrs.evolve(
    LIGHT,
    name="dark",
    dark=True,
    background="#0d1117",
    foreground="#e6edf3",
    muted="#8b949e",
    box_fill="#161b22",
    box_stroke="#8b949e",
    learned_fill="#3d2e00",
    learned_stroke="#f0f6fc",
    contraction_dot="#f0f6fc",
    block_fill="#0c2d6b",
    block_fill_alt="#051d4d",
    block_stroke="#388bfd",
    block_title="#a5d6ff",
    repeat_badge="#ff7b72",
    wire_halo="#0d1117",
    memory_levels=("#30363d", "#1f6feb", "#2ea043", "#bd561d"),
    kernel_stroke="#a371f7",
    partition_fill="#0d1117",
    axis_lightness=0.66,
)
PRESETS = {"light": LIGHT, "dark": DARK}


def resolve_theme(theme: Theme | Mapping[str, Any] | str | None) -> Theme:
    """Accept a Theme, a dict of keys, a preset name (``light``/``dark``) or a JSON file path."""
    if theme is None:
        return LIGHT
    if isinstance(theme, Theme):
        return theme
    if isinstance(theme, Mapping):
        return Theme.from_dict(theme)
    if theme in PRESETS:
        return PRESETS[theme]
    try:
        with open(theme, encoding="utf-8") as f:
            return Theme.from_json(f.read())
    except OSError as e:
        raise DiagramError(
            f"theme {theme!r} is neither a preset ({', '.join(PRESETS)}) nor a readable JSON "
            f"file: {e}"
        ) from e
