"""Themes restyle diagrams without code changes."""

from __future__ import annotations

import json

import pytest
from diagram_helpers import attention, elements, parse

import ncd_diagram as nd


def test_dark_theme_changes_background_and_boxes():
    light = parse(nd.draw(attention()))
    dark = parse(nd.draw(attention(), theme="dark"))
    bg = lambda r: elements(r, "rect", "background")[0].get("fill")
    assert bg(light) == nd.LIGHT.background and bg(dark) == nd.DARK.background
    assert nd.DARK.dark and "theme-dark" in dark.get("class")


def test_theme_from_dict_and_json(tmp_path):
    t = nd.Theme.from_dict({"base": "dark", "box_fill": "#123456", "wire_width": 3})
    assert t.dark and t.box_fill == "#123456" and t.wire_width == 3
    root = parse(nd.draw(attention(), theme={"box_fill": "#abcdef", "font_family": "Serif"}))
    assert {el.get("fill") for el in elements(root, "rect", "op")} == {"#abcdef"}
    assert root.get("font-family") == "Serif"
    path = tmp_path / "t.json"
    path.write_text(json.dumps({"background": "#000001"}))
    assert nd.Theme.from_json(path.read_text()).background == "#000001"
    root = parse(nd.draw(attention(), theme=str(path)))
    assert elements(root, "rect", "background")[0].get("fill") == "#000001"
    assert nd.Theme.from_dict(nd.DARK.to_dict()) == nd.DARK


@pytest.mark.parametrize(
    "bad,match",
    [({"colour_of_sky": "blue"}, "unknown theme key"), ({"base": "neon"}, "unknown base theme")],
)
def test_bad_themes_are_named(bad, match):
    with pytest.raises(nd.DiagramError, match=match):
        nd.Theme.from_dict(bad)
    with pytest.raises(nd.DiagramError, match="not valid JSON"):
        nd.Theme.from_json("{")


def test_dark_theme_keeps_axis_hues_but_lifts_their_lightness():
    import colorsys

    model = attention()
    root = parse(nd.draw(model, theme="dark"))
    colour = {a.uid: a.colour for a in model.graph.axes}

    def hls(c):
        return colorsys.rgb_to_hls(*(int(c[i : i + 2], 16) / 255 for i in (1, 3, 5)))

    for el in elements(root, "path"):
        if el.get("class") == "wire":
            h, light, _ = hls(el.get("stroke"))
            h0, light0, _ = hls(colour[el.get("data-axis")])
            assert abs(h - h0) < 0.02 and light > light0
