"""Kernel construction validates schedules; streaming roles and accumulators."""

from __future__ import annotations

import pytest

import ncd
from ncd import nn, ops
from ncd.kernel import Kernel, Partition, kernel_io
from ncd.streaming import analyse_stream


def _attention_kernel(model: ncd.Term, parts: list[Partition] | None = None) -> Kernel:
    g = model.graph
    nodes = list(range(len(g.nodes)))
    ins, outs = kernel_io(g, nodes)
    return Kernel(g, nodes, ins, outs, parts or [], "att")


def _axis(model: ncd.Term, name: str) -> ncd.Axis:
    return next(a for a in model.graph.axes if a.name == name)


ATT = ops.einsum("q d, x d -> q x") >> ops.softmax("x") >> ops.einsum("q x, x v -> q v")


def test_flash_kernel_is_valid_and_carries_online_softmax() -> None:
    x, q = _axis(ATT, "x"), _axis(ATT, "q")
    k = _attention_kernel(ATT, [Partition(q, "group", 16), Partition(x, "stream", 32)])
    assert k.streamed == (x,) and k.grouped == (q,)
    assert k.accumulators() == {0: "chunk", 1: "online_softmax", 2: "online_softmax"}


def test_spherical_attention_accumulates_l2() -> None:
    m = nn.spherical_attention(causal=True)
    kinds = _attention_kernel(m, [Partition(_axis(m, "x"), "stream", 8)]).accumulators()
    assert sorted(set(kinds.values())) == ["chunk", "l2"]


def test_streaming_a_normaliser_output_out_of_the_kernel_is_refused() -> None:
    m = ops.einsum("q d, x d -> q x") >> ops.softmax("x")
    with pytest.raises(
        ncd.ScheduleError, match=r"needs all of x#\w+.*stream x#\w+ into a contraction"
    ):
        _attention_kernel(m, [Partition(_axis(m, "x"), "stream", 8)])


def test_streaming_through_layernorm_is_refused_naming_op_and_fix() -> None:
    m = ops.layernorm("d") >> ops.linear("d -> e")
    with pytest.raises(ncd.ScheduleError, match=r"layernorm.*needs all of d#\w+.*Fix"):
        _attention_kernel(m, [Partition(_axis(m, "d"), "stream", 4)])


def test_non_homogeneous_map_between_normaliser_and_contraction_is_refused() -> None:
    m = (
        ops.einsum("q d, x d -> q x")
        >> ops.softmax("x")
        >> ops.exp()
        >> ops.einsum("q x, x v -> q v")
    )
    with pytest.raises(ncd.ScheduleError, match="does not commute"):
        _attention_kernel(m, [Partition(_axis(m, "x"), "stream", 4)])


def test_finished_reduction_mixed_with_a_chunk_is_refused() -> None:
    @ncd.trace(inputs=[ncd.ArrayType(ncd.axes("r c"))])
    def centre(t: ncd.Tensor) -> ncd.Tensor:
        return t - ops.mean("c")(t)

    with pytest.raises(ncd.ScheduleError, match="finished reduction"):
        _attention_kernel(centre, [Partition(_axis(centre, "c"), "stream", 4)])


def test_tile_that_does_not_divide_needs_a_tail() -> None:
    m = ATT.bind(q=13, x=7, d=5, v=3)
    q = _axis(m, "q")
    _attention_kernel(m, [Partition(q, "group", 4)])  # tail=True by default: fine
    with pytest.raises(ncd.ScheduleError, match=r"tile 4 does not divide q#\w+ \(13\).*tail=True"):
        _attention_kernel(m, [Partition(q, "group", 4, tail=False)])
    _attention_kernel(m, [Partition(_axis(m, "x"), "stream", 7, tail=False)])


def test_unknown_axis_and_duplicate_partitions() -> None:
    with pytest.raises(ncd.ScheduleError, match="none of its ops touches"):
        _attention_kernel(ATT, [Partition(ncd.Axis("z"), "group", 2)])
    q = _axis(ATT, "q")
    with pytest.raises(ncd.ScheduleError, match="two partitions"):
        _attention_kernel(ATT, [Partition(q, "group", 2), Partition(q, "group", 4)])


def test_level0_group_of_a_reduced_axis_is_refused_level1_allowed() -> None:
    x = _axis(ATT, "x")
    with pytest.raises(ncd.ScheduleError, match="Fix: stream x"):
        _attention_kernel(ATT, [Partition(x, "group", 8)])
    _attention_kernel(ATT, [Partition(x, "group", 8, level=1)])


def test_with_tiles_makes_symbolic_tiles_concrete() -> None:
    plan = ncd.fuse(ATT)
    (k,) = plan.kernels
    concrete = k.with_tiles({"t_q": 64, _axis(ATT, "x"): 32})
    assert {p.axis.name: p.tile for p in concrete.partitions} == {"q": 64, "x": 32}
    assert k.tile(_axis(ATT, "q")) == "t_q"


def test_analyse_stream_kinds_for_mlp() -> None:
    m = nn.mlp()
    g = m.graph
    ff = _axis(m, "d_ff")
    kinds = analyse_stream(g, range(len(g.nodes)), ff).kinds
    assert kinds == {0: "chunk", 1: "chunk", 2: "sum"}
