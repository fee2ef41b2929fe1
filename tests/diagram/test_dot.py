"""DOT text for any model; Graphviz rendering when ``dot`` is installed, a clear error without."""

from __future__ import annotations

import re

import pytest
from diagram_helpers import HAS_DOT, attention

import ncd
import ncd_diagram as nd
from ncd import ops
from ncd_diagram.dot import quote


def test_dot_names_every_op_and_colours_edges_per_axis():
    model = attention()
    g = model.graph
    text = nd.draw(model, "dot")
    assert text.startswith("digraph ")
    for i in range(len(g.nodes)):
        assert re.search(rf"^\s*n{i} \[", text, re.M)
    edges = re.findall(r'-> \S+ \[color="([^"]+)"', text)
    assert len(edges) == sum(len(n.inputs) for n in g.nodes) + len(g.outputs)
    colours = {a.colour for a in g.axes}
    for e in edges:
        assert set(e.split(":")) <= colours


def test_dot_clusters_blocks_and_marks_repeats():
    text = nd.draw(ncd.nn.gpt(layers=4), "dot")
    assert "subgraph cluster_" in text
    assert "blocks.0 … blocks.3 (transformer_block) \u00d74" in text
    closed = nd.draw(ncd.nn.gpt(layers=4), "dot", depth=0)
    assert "box3d" in closed and "cluster_" not in closed


def test_dot_quotes_hostile_names():
    assert quote('a"b\\c\nd') == '"a\\"b\\\\c\\nd"'
    text = nd.draw(ops.unary("relu", name='x"] ; evil [label="'), "dot")
    assert 'x\\"] ; evil [label=\\"' in text


@pytest.mark.skipif(
    not HAS_DOT, reason="Graphviz's dot is not installed (apt-get install graphviz)"
)
@pytest.mark.parametrize("fmt,magic", [("png", b"\x89PNG"), ("pdf", b"%PDF"), ("gv.svg", b"<")])
def test_graphviz_renders(fmt, magic):
    data = nd.draw(ncd.nn.multihead_attention(), fmt)
    assert isinstance(data, bytes) and data.lstrip().startswith(magic)


def test_without_dot_a_clear_error_carries_the_dot_text(no_dot):
    model = attention()
    with pytest.raises(nd.GraphvizNotFoundError) as info:
        nd.draw(model, "png")
    assert isinstance(info.value, ncd.NcdError)
    assert "apt-get install graphviz" in str(info.value)
    assert info.value.dot == nd.draw(model, "dot")
    assert nd.draw(model, "dot").startswith("digraph")  # DOT text needs no Graphviz


def test_unknown_format_is_an_ncd_error():
    with pytest.raises(nd.DiagramError, match="known: svg"):
        nd.draw(attention(), "bmp")


def test_native_engine_rasterises_the_native_svg():
    from diagram_helpers import cairo_available

    ok, why = cairo_available()
    if not ok:
        pytest.skip(why)
    png = nd.draw(attention(), "png", engine="native")
    pdf = nd.draw(attention(), "pdf", engine="native")
    assert png.startswith(b"\x89PNG") and pdf.startswith(b"%PDF")
    with pytest.raises(nd.DiagramError, match="unknown engine"):
        nd.draw(attention(), "png", engine="inkscape")
