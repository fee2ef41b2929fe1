"""Every canonical case and built-in model draws in every text format, wires complete."""

from __future__ import annotations

import json
from collections import Counter

import pytest
from diagram_helpers import elements, parse

import ncd_diagram as nd
from ncd.cli import BUILTIN_MODELS, load_model
from ncd.testing import cases

CASES = {c.name: c for c in cases()}


def _wire_uses(root):
    return Counter(
        (el.get("data-value"), el.get("data-axis"))
        for el in elements(root, "path")
        if el.get("class") == "wire"
    )


@pytest.mark.parametrize("name", sorted(CASES))
def test_case_draws(name):
    model = CASES[name].model
    g = model.graph
    d = nd.diagram(model, repeat=False)  # every block drawn, so every use has its wires
    root = parse(d.to_svg(legend=True))
    uses = _wire_uses(root)
    for node in g.nodes:  # every axis of every input reaches its op
        for v in node.inputs:
            for a in g.values[v].axes:
                assert uses[(str(v), a.uid)] >= 1, (name, node.op.label, a.ref)
    assert len(elements(root, "rect", "op")) == len(g.nodes)
    assert json.loads(d.to_json())["version"] == 1
    assert d.to_dot().startswith("digraph")


@pytest.mark.parametrize("name", BUILTIN_MODELS)
@pytest.mark.parametrize("depth", [None, 0, 1])
def test_builtin_model_draws(name, depth):
    model = load_model(name)
    root = parse(nd.draw(model, depth=depth))
    assert elements(root, "path", "wire")
