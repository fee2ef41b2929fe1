"""Cost-driven planning: ``ncd.fuse(..., objective="time")`` asks the installed cost model
(ncd-perf, through the plugin registry) whether chaining one contraction into another (the
fused MLP) pays, and returns the cheaper plan with the price of the one it rejected."""

from __future__ import annotations

import pytest

import ncd
import ncd_perf
from ncd.fusion import _PRICED_APART
from ncd_perf.machine import Level, Machine

MLP = ncd.nn.mlp().over("s").bind(s=2048, d_model=1024, d_ff=4096)


def _small_cache(capacity: float) -> Machine:
    fast = {"float32": 1e15}
    return Machine(
        "small-cache",
        (Level("DRAM"), Level("cache", capacity, 100e9)),
        {"matrix": fast, "vector": fast},
    )


def test_the_cheaper_plan_is_returned_with_the_alternatives_price() -> None:
    for machine in ("h100", _small_cache(16e3)):
        plan = ncd.fuse(MLP, objective="time", machine=machine)
        (chosen, t), (rejected, t_other) = plan.priced
        assert t <= t_other and chosen != rejected
        assert ncd_perf.cost(MLP, machine, plan=plan).time == pytest.approx(t)


def test_a_small_cache_prices_the_mlps_contractions_apart() -> None:
    machine = _small_cache(16e3)
    plan = ncd.fuse(MLP, objective="time", machine=machine)
    assert plan.priced[0][0] == "contractions apart" and len(plan.kernels) == 2
    assert any(b.reason == _PRICED_APART for b in plan.boundaries)
    chained = ncd.fuse(MLP)  # the merge rules alone chain them
    assert len(chained.kernels) == 1 and chained.priced == ()
    assert ncd_perf.cost(MLP, machine, plan=chained).time == pytest.approx(plan.priced[1][1])


def test_nothing_to_ask_without_a_chain_and_bad_objectives_are_typed() -> None:
    sm = ncd.ops.softmax("x").over("r").bind(r=64, x=64)
    assert ncd.fuse(sm, objective="time").priced == ()
    with pytest.raises(ncd.NcdError, match="objective='speed'"):
        ncd.fuse(MLP, objective="speed")
    with pytest.raises(ncd.NcdError, match="bind every size"):
        ncd.fuse(ncd.nn.mlp().over("s"), objective="time")
