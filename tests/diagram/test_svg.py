"""The native SVG: well-formed, one wire per axis occurrence in its colour, labels, NCD marks."""

from __future__ import annotations

from collections import Counter

import pytest
from diagram_helpers import attention, elements, parse, texts

import ncd
import ncd_diagram as nd
from ncd import ops


def _wires(root):  # the routed wires between boxes (not stubs, weaves or lead-ins)
    return [el for el in elements(root, "path") if el.get("class") == "wire"]


def test_svg_is_well_formed_with_title_and_size():
    root = parse(nd.draw(attention()))
    assert root.tag.endswith("svg")
    assert float(root.get("width")) > 100 and float(root.get("height")) > 50
    assert root.get("viewBox").startswith("0 0 ")


def test_one_wire_per_axis_occurrence_in_the_axis_colour():
    model = attention()
    g = model.graph
    root = parse(nd.draw(model))
    expected: Counter[tuple[str, str]] = Counter()
    for node in g.nodes:
        for v in node.inputs:
            for a in g.values[v].axes:
                expected[(str(v), a.uid)] += 1
    for v in g.outputs:
        for a in g.values[v].axes:
            expected[(str(v), a.uid)] += 1
    got = Counter((el.get("data-value"), el.get("data-axis")) for el in _wires(root))
    assert got == expected
    colour = {a.uid: a.colour for a in g.axes}
    for el in _wires(root):
        assert el.get("stroke") == colour[el.get("data-axis")]


def test_wire_labels_name_and_size():
    q, x, d, v = ncd.axes("q x d v", q=7, x=13, d=5, v=1)
    model = ncd.nn.attention(q, x, d, v)
    labels = texts(parse(nd.draw(model)))
    for text in ("q 7", "x 13", "d 5", "v 1"):
        assert text in labels
    free = texts(parse(nd.draw(attention())))
    assert {"q", "x", "d", "v"} <= set(free)


def test_every_input_wire_of_a_nested_model_is_drawn_in_its_colour():
    model = ncd.nn.multihead_attention()
    g = model.graph
    root = parse(nd.draw(model))
    drawn = {
        (el.get("data-value"), el.get("data-axis")): el.get("stroke")
        for el in elements(root, "path", "wire")
    }
    for node in g.nodes:
        for v in node.inputs:
            for a in g.values[v].axes:
                assert drawn.get((str(v), a.uid)) == a.colour, (node.op.label, a.ref)


def test_learned_ops_are_bold_and_name_their_parameters():
    model = ncd.nn.mlp()
    root = parse(nd.draw(model))
    ops_ = elements(root, "rect", "op")
    learned = [el for el in ops_ if "learned" in el.get("class").split()]
    plain = [el for el in ops_ if "learned" not in el.get("class").split()]
    assert {el.get("data-params") for el in learned} == {
        "fc.weight fc.bias",
        "proj.weight proj.bias",
    }
    assert len(plain) == 1  # gelu
    assert min(float(el.get("stroke-width")) for el in learned) > 2 * float(
        plain[0].get("stroke-width")
    )


def test_lifted_axes_weave_through_and_contractions_join_at_a_dot():
    model = attention()
    g = model.graph
    root = parse(nd.draw(model))
    loops = elements(root, "path", "loop")
    # softmax over x is lifted over q: q passes through its box
    softmax_loop = {a.uid for n in g.nodes if n.op.kind == "softmax" for a in n.loop}
    assert softmax_loop and softmax_loop <= {el.get("data-axis") for el in loops}
    dots = elements(root, "circle", "contraction-dot")
    assert len(dots) == 2  # d in the first einsum, x in the second
    joined = Counter(el.get("data-axis") for el in elements(root, "path", "contraction"))
    d = next(a for a in g.axes if a.name == "d")
    assert joined[d.uid] == 2  # both operands' d wires meet


def test_tuple_segments_are_separated():
    root = parse(nd.draw(attention()))
    assert len(elements(root, "line", "segment")) >= 2  # both einsums take two operands


def test_repeated_blocks_collapse_to_one_box_marked_times_n():
    model = ncd.nn.gpt(layers=12)
    root = parse(nd.draw(model))
    reps = elements(root, "rect", "repeat")
    assert len(reps) == 1 and reps[0].get("data-count") == "12"
    assert "\u00d712" in texts(root)
    assert any("blocks.0 … blocks.11" in t for t in texts(root))
    # the body is drawn once: 12 layers but only one block's q projection
    assert (
        sum(
            1
            for el in elements(root, "rect", "op")
            if el.get("data-params", "").endswith("attn.q.weight blocks.0.attn.q.bias")
        )
        == 1
    )
    flat = parse(nd.draw(model, repeat=False))
    assert not elements(flat, "rect", "repeat")
    assert len(elements(flat, "rect", "block")) >= 12


def test_depth_closes_blocks():
    model = ncd.nn.gpt(layers=2)
    top = parse(nd.draw(model, depth=0, repeat=False))
    closed = elements(top, "rect", "closed")
    assert {el.get("data-scope") for el in closed} and not elements(top, "rect", "open")
    assert not any((el.get("data-kind") == "einsum") for el in elements(top, "rect", "op"))
    one = parse(nd.draw(model, depth=1, repeat=False))
    assert len(elements(one, "rect", "open")) == 3  # blocks.0, blocks.1, ln_f; parts closed
    full = parse(nd.draw(model, repeat=False))
    assert sum(el.get("data-kind") == "einsum" for el in elements(full, "rect", "op")) == 4


def test_legend_lists_every_drawn_axis():
    model = ncd.nn.transformer_block()
    root = parse(nd.draw(model, legend=True))
    swatches = {el.get("data-axis") for el in elements(root, "line", "legend-swatch")}
    assert swatches == {
        a.uid
        for a in model.graph.axes
        if any(a in model.graph.values[v].axes for v in range(len(model.graph.values)))
    }
    assert not elements(parse(nd.draw(model)), "line", "legend-swatch")


def test_awkward_models_draw():
    x = ncd.Axis("x", size=1)
    ident = ncd.identity([x])
    root = parse(nd.draw(ident))
    assert elements(root, "path", "wire")
    const = ops.constant(2.0, (ncd.Axis("c", size=7),))
    assert parse(nd.draw(const))
    nasty = ops.unary("relu", name='<b>&"r"</b>')
    root = parse(nd.draw(nasty))  # names are escaped, never injected
    assert '<b>&"r"</b>' in texts(root)


def test_svg_is_stable_for_the_same_model():
    model = ncd.nn.gpt(layers=3)
    assert nd.draw(model) == nd.draw(model)
    again = ncd.from_json(ncd.to_json(model))
    assert nd.draw(again) == nd.draw(model)


@pytest.mark.parametrize("layers", [1, 4])
def test_gpt_sizes_shown_when_bound(layers):
    model = ncd.nn.gpt(layers=layers).bind(seq=13, d_model=8, heads=2, d_head=4, d_ff=16, vocab=7)
    labels = texts(parse(nd.draw(model, depth=0)))
    assert "seq 13" in labels and "vocab 7" in labels
