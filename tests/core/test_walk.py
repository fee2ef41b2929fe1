"""The shared graph walk (``ncd.walk``), the graph protocol and canonical equality."""

from __future__ import annotations

import itertools

import attrs
import pytest

import ncd
from ncd import nn, ops
from ncd.canonical import graph_key
from ncd.graph import Graph, Model, as_graph
from ncd.primitives import library as L
from ncd.walk import boundary, forward, rule_for, runs


def test_rule_for_finds_a_base_class_rule() -> None:
    @attrs.frozen
    class MySoftmax(L.Softmax):
        pass

    table = {L.Softmax: "softmax rule"}
    op = ops.softmax("x").graph.nodes[0].op
    mine = MySoftmax(axis=op.axis)
    assert rule_for(table, op) == "softmax rule"
    assert rule_for(table, mine) == "softmax rule"
    assert rule_for({}, mine) is None


def test_forward_visits_every_node_once_in_order() -> None:
    g = nn.mlp().bind(d_model=8, d_ff=16).graph
    seen: list[int] = []

    def step(i: int, node: object, xs: list[int]) -> list[int]:
        seen.append(i)
        return [max(xs, default=0) + 1] * len(g.nodes[i].outputs)

    outs = forward(g, [0] * len(g.inputs), step)
    assert seen == list(range(len(g.nodes)))
    assert outs == [len(g.nodes)]  # a chain: depth = node count


def test_boundary_of_a_block() -> None:
    g = nn.transformer_block().bind(seq=5, d_model=8, heads=2, d_head=4, d_ff=16).graph
    everything = range(len(g.nodes))
    assert boundary(g, everything) == (tuple(g.inputs), tuple(g.outputs))
    first = boundary(g, [0])
    assert first[0] == tuple(g.nodes[0].inputs)
    assert set(first[1]) == set(g.nodes[0].outputs)


def test_runs_split_consecutive_nodes_by_child() -> None:
    g = nn.gpt(layers=2).bind(seq=4, d_model=8, heads=2, d_head=4, d_ff=16, vocab=11).graph
    parts = list(runs(g, list(range(len(g.nodes))), lambda n: g.scope_prefix(n.scope)[:8]))
    assert sum(len(r) for _, r in parts) == len(g.nodes)
    assert all(a != b for (a, _), (b, _) in itertools.pairwise(parts))


def test_graph_protocol_and_as_graph() -> None:
    m = nn.mlp()
    assert isinstance(m, Model)
    assert as_graph(m, "x") is m.graph
    assert as_graph(m.graph, "x") is m.graph
    with pytest.raises(ncd.DefinitionError, match=r"ncd_perf\.cost takes a model"):
        as_graph(3, "ncd_perf.cost")


def test_canonical_key_defines_equality_and_hash() -> None:
    m = nn.gpt(layers=1).bind(seq=4, d_model=8, heads=2, d_head=4, d_ff=16, vocab=11)
    again = ncd.from_json(ncd.to_json(m)).graph
    assert again == m.graph and hash(again) == hash(m.graph)
    assert graph_key(again) == graph_key(m.graph)
    other = m.graph.with_sizes({a.uid: (a.size or 1) + 1 for a in m.graph.axes})
    assert other != m.graph
    assert len({m.graph, again, other}) == 2
    assert isinstance(m.graph, Graph)
