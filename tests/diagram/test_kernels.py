"""Kernel schedules drawn: kernels outlined, memory levels coloured, partitions as hexagons."""

from __future__ import annotations

import pytest
from diagram_helpers import attention, elements, parse

import ncd
import ncd_diagram as nd
from ncd.kernel import FusionPlan, Kernel, Partition, kernel_io, unfused


def test_flash_attention_plan_marks_partitions_with_hexagons():
    model = attention()
    g = model.graph
    q = next(a for a in g.axes if a.name == "q")
    x = next(a for a in g.axes if a.name == "x")
    ins, outs = kernel_io(g, range(len(g.nodes)))
    plan = FusionPlan(
        g,
        [
            Kernel(
                g,
                range(len(g.nodes)),
                ins,
                outs,
                [Partition(q, "group", 64), Partition(x, "stream", 32)],
                "flash",
            )
        ],
    )
    root = parse(nd.draw(model, plan=plan))
    hexes = elements(root, "polygon", "partition")
    assert {(h.get("data-axis"), h.get("data-partition")) for h in hexes} == {
        (q.uid, "g0"),
        (x.uid, "s0"),
    }
    assert {el.get("data-kernel") for el in elements(root, "rect", "kernel")} == {"0"}
    levels = {el.get("data-level") for el in elements(root, "path", "memory")}
    assert levels == {"0", "1"}  # model inputs/outputs in memory, scores kept on chip
    data = nd.diagram(model, plan=plan).to_dict()
    assert data["kernels"]["kernels"][0]["partitions"][1] == {
        "axis": x.uid,
        "kind": "stream",
        "tile": 32,
        "level": 0,
        "tail": True,
    }
    assert "s0:x" in nd.draw(model, "dot", plan=plan)


def test_unfused_plan_keeps_everything_in_memory():
    model = ncd.nn.multihead_attention()
    root = parse(nd.draw(model, plan=unfused(model)))
    assert {el.get("data-level") for el in elements(root, "path", "memory")} == {"0"}
    assert len(elements(root, "rect", "kernel")) == len(model.graph.nodes)


def test_fuse_plan_draws():
    if not hasattr(ncd, "fuse"):
        pytest.skip("ncd.fuse is not in this ncd-core yet")
    model = ncd.nn.multihead_attention()
    plan = ncd.fuse(model)
    root = parse(nd.draw(model, plan=plan))
    assert elements(root, "polygon", "partition")


def test_plan_for_another_model_is_refused():
    with pytest.raises(nd.DiagramError, match="different graph"):
        nd.draw(attention(), plan=unfused(ncd.nn.mlp()))
    with pytest.raises(nd.DiagramError, match="FusionPlan"):
        nd.draw(attention(), plan="flash")
