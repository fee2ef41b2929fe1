"""ncd-perf prices exactly the plan it is given: one KernelCost per plan kernel, the schedule's
int tiles priced as given at every level where the plan sets them, the tile chooser filling
the levels it leaves open."""

from __future__ import annotations

import attrs
import pytest
import sympy as sp

import ncd
import ncd_perf
from ncd import nn, ops
from ncd.kernel import FusionPlan, Partition

MLP = nn.mlp().over(ncd.Axis("seq", size=256)).bind(d_model=64, d_ff=256)


def _linear(rows: int = 512, cols: int = 256) -> ncd.Term:
    s = ncd.Axis("s", size=rows)
    return ops.linear("d -> e", d=128, e=cols).over(s)


def _with_choices(plan: FusionPlan, level0: int, level1: int | None) -> FusionPlan:
    """Each kernel's level-0 group axes get ``level0`` (and ``level1`` at level 1) as a
    target's choices would."""
    kernels = []
    for k in plan.kernels:
        made = [
            Partition(p.axis, "group", level0, 0) for p in k.partitions_at(0) if p.kind == "group"
        ]
        if level1 is not None:
            made += [Partition(p.axis, "group", level1, 1) for p in made]
        kernels.append(k.with_choices(made))
    return attrs.evolve(plan, kernels=kernels, target="fake")


def test_one_kernel_cost_per_plan_kernel() -> None:
    plan = _with_choices(ncd.fuse(MLP), 16, 4)
    cost = ncd_perf.cost(MLP, "h100", plan=plan)
    assert [k.kernel for k in cost.kernels] == list(plan.kernels)
    assert cost.plan is plan


def test_plan_levels_map_onto_machine_levels() -> None:
    model = _linear()
    plan = _with_choices(ncd.fuse(model), 32, 4)
    (kc,) = ncd_perf.cost(model, "cpu", plan=plan).kernels
    assert [lv.name for lv in kc.levels] == ["L3", "L2", "L1"]
    (ts, te) = kc.formulas.tiles.values()
    # the work-group tile prices the outer levels, the work-item block the innermost
    assert [lv.tiles[ts] for lv in kc.levels] == [32, 32, 4]
    assert [lv.tiles[te] for lv in kc.levels] == [32, 32, 4]
    assert all(lv.method.startswith("given") for lv in kc.levels)


def test_a_gpu_widens_a_targets_tiles_by_what_runs_together() -> None:
    model = _linear()
    plan = _with_choices(ncd.fuse(model), 32, 4)
    (kc,) = ncd_perf.cost(model, "h100", plan=plan).kernels
    assert [lv.name for lv in kc.levels] == ["L2", "SMEM", "registers"]
    (ts, te) = kc.formulas.tiles.values()
    # L2 is shared by the 132 SMs' blocks (up to the axis, 512); a warp's 32 lanes share
    # their shared-memory reads (up to the work-group tile); the other tile stays as given
    assert [lv.tiles[ts] for lv in kc.levels] == [512, 32, 32]
    assert [lv.tiles[te] for lv in kc.levels] == [32, 32, 4]
    # a plan that is no target's (ncd.fuse's own tiles) is priced literally
    literal = attrs.evolve(plan, target=None)
    (kl,) = ncd_perf.cost(model, "h100", plan=literal).kernels
    assert [lv.tiles[ts] for lv in kl.levels] == [32, 32, 4]


def test_level0_choices_price_every_level() -> None:
    model = _linear()
    plan = _with_choices(ncd.fuse(model), 64, None)
    (kc,) = ncd_perf.cost(model, "cpu", plan=plan).kernels
    assert all(set(lv.tiles.values()) == {sp.Integer(64)} for lv in kc.levels)


def test_prices_differ_when_tiles_differ() -> None:
    model = _linear()
    small = ncd_perf.cost(model, "h100", plan=_with_choices(ncd.fuse(model), 16, 4))
    large = ncd_perf.cost(model, "h100", plan=_with_choices(ncd.fuse(model), 128, 8))
    assert small.transfers_at(1) > large.transfers_at(1)  # smaller tiles re-read more
    assert small.transfers_at(3) != large.transfers_at(3)


def test_open_levels_are_chosen_by_ncd_perf() -> None:
    model = _linear()
    plan = ncd.fuse(model)
    (k,) = plan.kernels
    s = next(a for a in k.axes() if a.name == "s")
    one = attrs.evolve(plan, kernels=[k.with_choices([Partition(s, "group", 16, 0)])])
    (kc,) = ncd_perf.cost(model, "h100", plan=one).kernels
    ts, te = kc.formulas.tiles[s], next(t for a, t in kc.formulas.tiles.items() if a != s)
    assert all(lv.tiles[ts] == 16 for lv in kc.levels)
    assert any("search" in lv.method or "whole" in lv.method for lv in kc.levels)
    assert all(lv.tiles[te].is_Integer for lv in kc.levels)


def test_without_a_plan_the_price_is_ncds_own_best() -> None:
    cost = ncd_perf.cost(MLP, "h100")
    assert len(cost.kernels) == len(ncd.fuse(MLP).kernels)
    assert not any(lv.method.startswith("given") for k in cost.kernels for lv in k.levels)


def test_identical_kernels_with_different_choices_are_priced_apart() -> None:
    model = _linear()
    plan = ncd.fuse(model)
    (k,) = plan.kernels
    s = next(a for a in k.axes() if a.name == "s")
    a = k.with_choices([Partition(s, "group", 8, 0)])
    b = k.with_choices([Partition(s, "group", 256, 0)])
    two = attrs.evolve(plan, kernels=[a, b])
    ka, kb = ncd_perf.cost(model, "h100", plan=two).kernels
    assert ka.levels[0].transfers != kb.levels[0].transfers


@pytest.mark.parametrize("machine", ["h100", "cpu"])
def test_an_opencl_plan_is_priced_kernel_for_kernel(machine: str) -> None:
    pytest.importorskip("ncd_opencl")
    pytest.importorskip("pyopencl")
    gpt = nn.gpt(layers=2).bind(seq=64, d_model=64, heads=4, d_head=16, d_ff=128, vocab=97)
    plan = ncd.plan(gpt, target="opencl")
    cost = ncd_perf.cost(gpt, machine, plan=plan)
    assert len(cost.kernels) == len(plan.kernels) == 20
    retiled = ncd.plan(gpt, target="opencl", tiles={("k4_*", "seq", 0): 8})
    before, after = (ncd_perf.cost(gpt, machine, plan=p).kernels[6] for p in (plan, retiled))
    # on the GPU the shared L2 sees every SM's blocks together (the whole 64-row axis either
    # way), so the retiling shows at the per-SM levels
    level = 1 if machine == "h100" else 0
    assert before.levels[level].transfers != after.levels[level].transfers
