"""Sequence parallelism priced as it runs: each device keeps its slice of the queries (the
tokens), the attention kernel's keys stay whole and K and V are all-gathered (or passed around
a ring); the hand figure of docs/perf.md."""

from __future__ import annotations

import attrs
import pytest

import ncd
import ncd_perf
from ncd.errors import NcdError

H100 = ncd_perf.load_machine("h100")
N, D_MODEL, HEADS, D_HEAD, P = 32768, 2048, 16, 128, 8


def _mha() -> ncd.Term:
    mha = ncd.nn.multihead_attention()
    return mha.bind(seq=N, d_model=D_MODEL, heads=HEADS, d_head=D_HEAD).cast(ncd.bfloat16)


def _sp(sequence: str = "all-gather") -> ncd_perf.ModelCost:
    return ncd_perf.cost(_mha(), H100.with_devices(P), parallel={"seq": P}, sequence=sequence)


def test_the_keys_stay_whole_and_the_queries_are_split() -> None:
    one, sp = ncd_perf.cost(_mha(), H100), _sp()
    q, attention, o = sp.kernels
    # the projections compute on the device's own tokens: an eighth each, nothing moved
    for k, k1 in ((q, one.kernels[0]), (o, one.kernels[2])):
        assert float(k.flops["matrix"]) * P == float(k1.flops["matrix"])
        assert not k.collectives
    # attention: 4096 query rows against all 32768 keys (not 4096 x 4096, an eighth of it);
    # under contiguous shards the last device's rows see the most keys (the critical path)
    t = N // P
    share = 1 - (t - 1) / (2 * N)
    assert float(attention.flops["matrix"]) == pytest.approx(4 * t * N * HEADS * D_HEAD * share)
    full = float(one.kernels[1].flops["matrix"])
    assert float(attention.flops["matrix"]) > full / P  # more than the average device's


def test_k_and_v_are_all_gathered() -> None:
    attention = _sp().kernels[1]
    assert [c.kind for c in attention.collectives] == ["all-gather", "all-gather"]
    for c in attention.collectives:
        assert float(c.bytes) == N * HEADS * D_HEAD * 2  # the whole K (or V), bfloat16
        assert c.devices == P and not c.overlaps


def test_the_worked_example_reproduces_the_hand_figure() -> None:
    attention = _sp().kernels[1]
    t = N // P
    share = 1 - (t - 1) / (2 * N)
    blocks = HEADS * t // 32  # the SMEM tile: 1 head x 32 query rows
    waves = -(-blocks // 132)
    matrix = 4 * t * N * HEADS * D_HEAD * share / 989.5e12 / (blocks / (waves * 132))
    gather = (P - 1) * 2e-6 + (P - 1) / P * N * HEADS * D_HEAD * 2 / 450e9
    hand = 3e-6 + matrix + 2 * gather
    assert attention.time == pytest.approx(hand, rel=1e-6)
    assert hand == pytest.approx(1627.3e-6, abs=0.1e-6)
    ring = _sp("ring").kernels[1]
    assert [c.kind for c in ring.collectives] == ["ring", "ring"]
    # the ring's p - 1 steps hide behind the compute (1074 us > 550 us of transfers)
    assert ring.time == pytest.approx(3e-6 + matrix, rel=1e-6)


def test_a_ring_slower_than_the_compute_bounds_the_kernel() -> None:
    slow = H100.with_devices(P)
    assert slow.interconnect is not None
    slow = attrs.evolve(slow, interconnect=attrs.evolve(slow.interconnect, bandwidth=45e9))
    ring = ncd_perf.cost(_mha(), slow, parallel={"seq": P}, sequence="ring").kernels[1]
    passes = sum(c.time(slow) or 0.0 for c in ring.collectives)
    assert ring.bottleneck.startswith("ring pass")
    assert ring.time == pytest.approx(3e-6 + passes, rel=1e-9)


def test_tokens_split_without_keys_move_nothing() -> None:
    # a label on queries only (bare attention, keys bound apart) splits rows, K and V are inputs
    att = ncd.nn.attention().over("h").bind(h=16, q=8192, x=8192, d=128, v=128)
    (k,) = ncd_perf.cost(att, H100.with_devices(8), parallel={"q": 8}).kernels
    assert not k.collectives


def test_an_unknown_sequence_mode_is_a_typed_error() -> None:
    with pytest.raises(NcdError, match=r"sequence=.broadcast.*all-gather, ring"):
        ncd_perf.cost(_mha(), H100.with_devices(P), parallel={"seq": P}, sequence="broadcast")
