"""PNGs of attention, multi-head attention and a 2-layer GPT in ``artifacts/diagrams/`` (gitignored)
for people to look at: the native drawing rasterised by CairoSVG and Graphviz's rendering."""

from __future__ import annotations

import pytest
from diagram_helpers import HAS_DOT, attention, cairo_available

import ncd
import ncd_diagram as nd

MODELS = {
    "attention": (attention, {}),
    "mha": (ncd.nn.multihead_attention, {}),
    "gpt2": (lambda: ncd.nn.gpt(layers=2), {"repeat": False}),
    "gpt2_folded": (lambda: ncd.nn.gpt(layers=2), {}),
    "gpt12_top": (
        lambda: ncd.nn.gpt(layers=12).bind(
            seq=64, d_model=128, heads=4, d_head=32, d_ff=512, vocab=256
        ),
        {"depth": 1},
    ),
    "flash_attention": (attention, {"plan": "fuse"}),
}


def _options(model, options):
    options = dict(options)
    if options.get("plan") == "fuse":
        options["plan"] = ncd.fuse(model) if hasattr(ncd, "fuse") else ncd.kernel.unfused(model)
    return options


@pytest.mark.parametrize("name", sorted(MODELS))
def test_native_png(name, artifacts):
    ok, why = cairo_available()
    if not ok:
        pytest.skip(why)
    make, options = MODELS[name]
    model = make()
    svg = nd.draw(model, legend=True, **_options(model, options))
    png = nd.svg_to_png(svg)
    assert png.startswith(b"\x89PNG") and len(png) > 2000
    (artifacts / f"{name}.png").write_bytes(png)
    (artifacts / f"{name}.svg").write_text(svg)
    dark = nd.draw(model, theme="dark", **_options(model, options))
    (artifacts / f"{name}.dark.png").write_bytes(nd.svg_to_png(dark))


@pytest.mark.skipif(
    not HAS_DOT, reason="Graphviz's dot is not installed (CI: apt-get install graphviz)"
)
@pytest.mark.parametrize("name", ["attention", "mha", "gpt2", "flash_attention"])
def test_graphviz_png(name, artifacts):
    make, options = MODELS[name]
    model = make()
    png = nd.draw(model, "png", legend=True, **_options(model, options))
    assert isinstance(png, bytes) and png.startswith(b"\x89PNG")
    (artifacts / f"{name}.graphviz.png").write_bytes(png)
