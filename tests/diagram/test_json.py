"""Diagram JSON: versioned, layout-free tree plus layout, stable for the same model."""

from __future__ import annotations

import json

from diagram_helpers import attention

import ncd
import ncd_diagram as nd


def _walk(item):
    yield item
    for c in item.get("children", []):
        yield from _walk(c)
    if "body" in item:
        yield from _walk(item["body"])


def test_header_axes_and_values():
    model = ncd.nn.transformer_block()
    data = json.loads(nd.diagram(model).to_json())
    assert data["format"] == nd.FORMAT and data["version"] == nd.VERSION == 1
    g = model.graph
    assert [a["uid"] for a in data["axes"]] == [a.uid for a in g.axes]
    assert all(
        a["colour"] == ax.colour and a["name"] == ax.name for a, ax in zip(data["axes"], g.axes)
    )
    assert len(data["values"]) == len(g.values)
    assert data["inputs"] == list(g.inputs) and data["outputs"] == list(g.outputs)


def test_tree_has_every_op_once_with_loops_and_learned_marks():
    model = ncd.nn.gpt(layers=2)
    g = model.graph
    data = nd.diagram(model, repeat=False).to_dict()
    ops = [it for it in _walk(data["root"]) if it["type"] == "op"]
    assert sorted(it["node"] for it in ops) == list(range(len(g.nodes)))
    for it in ops:
        node = g.nodes[it["node"]]
        assert it["loop"] == [a.uid for a in node.loop]
        assert it["learned"] == bool(node.op.params())
        assert it["params"] == [name for name, _ in node.params()]
    blocks = [it for it in _walk(data["root"]) if it["type"] == "block"]
    assert {b["scope_label"] for b in blocks} >= {"blocks.0", "blocks.1", "attn", "mlp", "ln_f"}


def test_repeat_item_lists_its_blocks():
    data = nd.diagram(ncd.nn.gpt(layers=5)).to_dict()
    reps = [it for it in _walk(data["root"]) if it["type"] == "repeat"]
    assert len(reps) == 1
    assert reps[0]["count"] == 5
    assert reps[0]["labels"] == [f"blocks.{i}" for i in range(5)]
    assert reps[0]["body"]["type"] == "block"


def test_layout_covers_every_box_and_wire():
    model = attention()
    data = nd.diagram(model).to_dict()
    lay = data["layout"]
    ids = {it["id"] for it in _walk(data["root"])} - {data["root"]["id"]}
    assert set(lay["boxes"]) == ids
    for box in lay["boxes"].values():
        assert box["w"] > 0 and box["h"] > 0
    axes = {a["uid"] for a in data["axes"]}
    assert lay["wires"] and all(w["axis"] in axes and len(w["points"]) >= 2 for w in lay["wires"])
    assert "layout" not in nd.diagram(model).to_dict(with_layout=False)


def test_json_is_stable():
    model = ncd.nn.gpt(layers=3)
    first = nd.diagram(model).to_json()
    assert nd.diagram(model).to_json() == first
    assert nd.diagram(ncd.from_json(ncd.to_json(model))).to_json() == first
