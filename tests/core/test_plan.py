"""The kernel's Schedule (computed once, equal to the facts readers used to recompute) and
``ncd.plan`` / ``apply_tiles`` in core."""

from __future__ import annotations

import collections
from collections.abc import Iterator
from typing import Any

import attrs
import pytest

import ncd
from ncd import nn
from ncd.kernel import FusionPlan, Kernel, Partition, kernel_io
from ncd.planning import apply_tiles
from ncd.streaming import REDUCING, analyse_stream, is_rename, role

GPT = nn.gpt(layers=2).bind(seq=64, d_model=64, heads=4, d_head=16, d_ff=128, vocab=97)
ATTENTION = nn.attention(causal=True).bind(q=13, x=7, d=8, v=8)
MOE = nn.moe().bind(seq=7, d_model=16, d_ff=32, experts=4)
MODELS = {"gpt": GPT, "attention": ATTENTION, "moe": MOE}


def _old_facts(k: Kernel) -> dict[str, Any]:
    """The facts as each reader worked them out before the schedule held them."""
    g = k.graph
    aliases = {}
    for n in k.ops:
        if is_rename(n.op):
            aliases[n.op.out_axes[0]] = n.op.in_axes[0]  # type: ignore[attr-defined]
    streamed = [p.axis for p in k.partitions if p.kind == "stream"]
    kinds = analyse_stream(g, k.nodes, streamed[0], k.outputs).kinds if streamed else {}

    def root(a: ncd.Axis) -> ncd.Axis:
        while a in aliases:
            a = aliases[a]
        return a

    grid = list(dict.fromkeys(root(p.axis) for p in k.partitions_at(0) if p.kind == "group"))
    contracted = list(
        dict.fromkeys(
            a for n in k.ops for a in n.op.axes() if a not in n.loop and role(n, a) in REDUCING
        )
    )
    return {
        "io": kernel_io(g, k.nodes),
        "aliases": aliases,
        "accumulators": kinds,
        "grid": grid,
        "contracted": contracted,
    }


@pytest.mark.parametrize("name", sorted(MODELS))
def test_schedule_facts_equal_the_recomputed_ones(name: str) -> None:
    plan = ncd.fuse(MODELS[name])
    assert plan.kernels
    for k in plan.kernels:
        s, old = k.schedule, _old_facts(k)
        assert (s.inputs, s.outputs) == old["io"] == (k.inputs, k.outputs)
        assert dict(s.aliases) == old["aliases"] == k.aliases
        assert dict(s.accumulators) == old["accumulators"] == k.accumulators()
        assert list(s.grid) == old["grid"]
        assert list(s.contracted) == old["contracted"]
        assert s.partitions == k.partitions  # no choices: the planner's partitions
        for p in k.partitions:
            assert s.partition(p.axis, p.level) == p and k.tile(p.axis, p.level) == p.tile


def test_attention_schedule_streams_the_key_axis_with_online_softmax() -> None:
    (k,) = ncd.fuse(ATTENTION).kernels
    s = k.schedule
    assert s.streamed is not None and s.streamed.name == "x"
    assert set(s.accumulators.values()) >= {"online_softmax"}
    assert {a.name for a in s.contracted} == {"d", "x"}
    assert s.partition(s.streamed, 1) is None  # nothing chosen at level 1: whole


@pytest.fixture
def counts(monkeypatch: pytest.MonkeyPatch) -> Iterator[collections.Counter[str]]:
    """Calls of kernel_io and analyse_stream, wherever they were imported by name."""
    import sys

    import ncd.kernel
    import ncd.streaming

    seen: collections.Counter[str] = collections.Counter()
    for name, orig in (
        ("kernel_io", ncd.kernel.kernel_io),
        ("analyse_stream", ncd.streaming.analyse_stream),
    ):

        def wrapped(*a: Any, _orig: Any = orig, _name: str = name, **kw: Any) -> Any:
            seen[_name] += 1
            return _orig(*a, **kw)

        for mod in list(sys.modules.values()):
            if getattr(mod, name, None) is orig and mod.__name__.startswith("ncd"):
                monkeypatch.setattr(mod, name, wrapped)
    yield seen


def test_readers_of_a_schedule_recompute_nothing(counts: collections.Counter[str]) -> None:
    plan = ncd.fuse(GPT)
    counts.clear()
    for _ in range(5):
        for k in plan.kernels:
            k.accumulators()
            k.aliases
            k.axes()
            k.schedule.partitions
            k.tile(k.axes()[0])
    assert counts == {}


def test_fuse_works_out_each_node_set_once(counts: collections.Counter[str]) -> None:
    # before the schedule: 157 kernel_io and 18 analyse_stream calls for these 14 kernels
    plan = ncd.fuse(GPT)
    assert len(plan.kernels) == 14
    assert counts["kernel_io"] <= 2 * len(plan.kernels)  # now 24 and 18
    assert counts["analyse_stream"] <= 2 * len(plan.kernels)


def _choice_plan() -> tuple[FusionPlan, ncd.Axis]:
    """ncd.fuse of attention with a stream-chunk choice and a level-1 row choice, as a target
    would record them."""
    plan = ncd.fuse(ATTENTION)
    (k,) = plan.kernels
    x = k.schedule.streamed
    assert x is not None
    q = next(a for a in k.axes() if a.name == "q")
    k = k.with_choices([Partition(x, "stream", 4, 0), Partition(q, "group", 2, 1)])
    return attrs.evolve(plan, kernels=[k], target="fake"), q


def test_choices_replace_the_planner_partition_in_the_schedule() -> None:
    plan, q = _choice_plan()
    (k,) = plan.kernels
    x = k.schedule.streamed
    assert x is not None
    assert k.tile(x) == 4 and k.chosen(x) == 4 and k.chosen(q, 1) == 2
    assert k.schedule.levels == 2
    assert str(k) == str(ncd.fuse(ATTENTION).kernels[0])  # str shows the planner's
    assert "stream(x/4@L0)*" in k.describe() and "group(q/2@L1)*" in k.describe()
    assert "target 'fake'" in str(plan)


def test_a_chosen_tile_must_nest_inside_its_outer_level() -> None:
    (k,) = ncd.fuse(ATTENTION).kernels
    q = next(a for a in k.axes() if a.name == "q")
    with pytest.raises(ncd.ScheduleError, match="does not fit inside its level-0 tile 2"):
        k.with_choices([Partition(q, "group", 2, 0), Partition(q, "group", 4, 1)])
    with pytest.raises(ncd.ScheduleError, match="needs an int tile"):
        k.with_choices([Partition(q, "group", "t_q", 1)])


def test_apply_tiles_overrides_choices_by_name_level_and_kernel_pattern() -> None:
    plan, q = _choice_plan()
    x = plan.kernels[0].schedule.streamed
    assert x is not None
    assert apply_tiles(plan, {"x": 7}).kernels[0].tile(x) == 7
    assert apply_tiles(plan, {(q, 1): 3}).kernels[0].chosen(q, 1) == 3
    assert apply_tiles(plan, {("k0_*", "q", 1): 5}).kernels[0].chosen(q, 1) == 5


@pytest.mark.parametrize(
    ("tiles", "match"),
    [
        ({"d": 2}, "matches no tile the plan chose.*Fix:"),
        ({"x": 8}, r"does not fit x#\w+ \(7\).*Fix: a tile between 1 and 7"),
        ({"x": 0}, "no positive int.*Fix:"),
        ({"x": 2.5}, "no positive int.*Fix:"),
        ({("x", "0"): 2}, "is not \\(axis, level\\).*Fix:"),
        ({3: 2}, "names no axis.*Fix:"),
        ({("nope*", "q", 1): 2}, "matches no tile"),
    ],
)
def test_bad_tiles_are_refused_with_the_fix(tiles: dict[Any, Any], match: str) -> None:
    plan, _ = _choice_plan()
    with pytest.raises(ncd.ScheduleError, match=match):
        apply_tiles(plan, tiles)


def test_a_key_without_level_on_an_axis_chosen_at_two_levels_is_ambiguous() -> None:
    plan, q = _choice_plan()
    (k,) = plan.kernels
    k = k.with_choices([Partition(q, "group", 4, 0)])
    with pytest.raises(ncd.ScheduleError, match=r"at levels 0, 1 .*Fix: give the level"):
        apply_tiles(attrs.evolve(plan, kernels=[k]), {"q": 2})


def test_plan_without_target_is_fuse() -> None:
    plan = ncd.plan(GPT)
    assert plan.target is None
    assert [k.nodes for k in plan.kernels] == [k.nodes for k in ncd.fuse(GPT).kernels]
    tiled = ncd.plan(ATTENTION, tiles={"q": 8})
    assert tiled.kernels[0].partitions == ncd.fuse(ATTENTION, tiles={"q": 8}).kernels[0].partitions
    with pytest.raises(ncd.ScheduleError, match="per-level keys"):
        ncd.plan(ATTENTION, tiles={("q", 1): 8})
    with pytest.raises(ncd.ScheduleError, match="takes no options"):
        ncd.plan(ATTENTION, fuse=False)


def test_plan_for_an_unknown_target_is_the_registry_error() -> None:
    with pytest.raises(ncd.TargetNotFoundError):
        ncd.plan(GPT, target="no-such-target")


def test_plan_for_a_backend_that_does_not_plan_says_so() -> None:
    with pytest.raises(ncd.ScheduleError, match=r"'reference' does not plan kernels.*Fix:"):
        ncd.plan(GPT, target="reference")


def test_plan_refuses_a_non_model() -> None:
    with pytest.raises(ncd.DefinitionError):
        ncd.plan(3)
