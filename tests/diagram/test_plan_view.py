"""A target's plan (``ncd.plan(model, target=...)``) drawn: its choices are partitions in force."""

from __future__ import annotations

import attrs
from diagram_helpers import attention, elements, parse

import ncd
import ncd_diagram as nd
from ncd.kernel import Partition


def _target_plan(model: ncd.Term) -> tuple[ncd.FusionPlan, ncd.Axis, ncd.Axis]:
    plan = ncd.fuse(model)
    (k,) = plan.kernels
    x = k.streamed[0]
    q = next(a for a in k.axes() if a.name == "q")
    k = k.with_choices([Partition(x, "stream", 4, 0), Partition(q, "group", 2, 1)])
    return attrs.evolve(plan, kernels=[k], target="opencl"), q, x


def test_a_target_plan_draws_its_choices() -> None:
    model = attention().bind(q=13, x=7, d=8, v=8)
    plan, q, x = _target_plan(model)
    root = parse(nd.draw(model, plan=plan))
    marks = {
        (h.get("data-axis"), h.get("data-partition"))
        for h in elements(root, "polygon", "partition")
    }
    assert (q.uid, "g1") in marks and (x.uid, "s0") in marks
    data = nd.diagram(model, plan=plan).to_dict()["kernels"]
    assert data["target"] == "opencl"
    parts = {(p["axis"], p["level"]): p for p in data["kernels"][0]["partitions"]}
    assert parts[x.uid, 0]["tile"] == 4 and parts[x.uid, 0]["chosen"] is True
    assert parts[q.uid, 1] == {
        "axis": q.uid,
        "kind": "group",
        "tile": 2,
        "level": 1,
        "tail": True,
        "chosen": True,
    }
    assert parts[q.uid, 0]["chosen"] is False  # the planner's partition


def test_ncds_own_plan_has_no_target_entry() -> None:
    model = attention().bind(q=13, x=7, d=8, v=8)
    data = nd.diagram(model, plan=ncd.fuse(model)).to_dict()["kernels"]
    assert "target" not in data
