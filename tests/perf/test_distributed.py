"""Distributed terms that add up: expert parallelism divides the FLOPs and the tokens, moves
the tokens it must and keeps only the device's experts; the hand figure of docs/perf.md."""

from __future__ import annotations

import pytest

import ncd
import ncd_perf

H100 = ncd_perf.load_machine("h100")


def _moe() -> ncd.Term:
    return ncd.nn.moe(k=2).bind(seq=4096, d_model=1024, d_ff=4096, experts=8).cast(ncd.bfloat16)


def test_expert_parallel_divides_flops_tokens_and_weights() -> None:
    single = ncd_perf.cost(_moe(), H100)
    ep = ncd_perf.cost(_moe(), H100.with_devices(8), parallel={"experts": 8})
    assert float(ep.kernels[1].flops["matrix"]) * 8 == float(single.kernels[1].flops["matrix"])
    # one expert of eight is held: its 2 x 1024 x 4096 bfloat16 weights, twice (k/E_local = 2)
    weights = 2 * 1024 * 4096 * 2
    moved = float(ep.kernels[1].levels[0].bytes)
    assert 2 * weights < moved < 2 * weights + 3e6
    # one device streams the whole 134 MB bank from HBM once, not once per token tile
    bank = 8 * weights
    assert bank < float(single.kernels[1].levels[0].bytes) < bank + 20e6
    (a2a, _) = [c for c in ep.kernels[1].collectives if c.kind == "all-to-all"]
    assert float(a2a.bytes) == 512 * 2 * 1024 * 2  # the device's own tokens, k copies each


def test_the_worked_example_reproduces_the_hand_figure() -> None:
    ep = ncd_perf.cost(_moe(), H100.with_devices(8), parallel={"experts": 8})
    bank = ep.kernels[1]
    t, k, d, f, e, p = 512, 2, 1024, 4096, 8, 8
    matrix = t * k * 4 * d * f / 989.5e12 / (128 / 132)
    a2a = 2 * ((p - 1) * 2e-6 + (p - 1) / p * t * k * d * 2 / 450e9)
    gather = (p - 1) * 2e-6 + (p - 1) / p * t * e * 2 / 450e9
    hand = 3e-6 + matrix + a2a + gather
    assert bank.time == pytest.approx(hand, rel=1e-6)
    assert hand == pytest.approx(71.08e-6, abs=0.01e-6)


def test_tensor_parallel_mlp_divides_flops_and_all_reduces() -> None:
    mlp = ncd.nn.mlp().over("seq").bind(seq=2048, d_model=1024, d_ff=4096)
    single = ncd_perf.cost(mlp, H100)
    tp = ncd_perf.cost(mlp, H100.with_devices(8), parallel={"d_ff": 8})
    assert float(tp.flops["matrix"]) * 8 == float(single.flops["matrix"])
    (c,) = tp.kernels[0].collectives
    assert c.kind == "all-reduce" and float(c.bytes) == 2048 * 1024 * 4
    t = c.time(tp.machine)
    assert t == pytest.approx(14 * 2e-6 + 2 * 7 / 8 * 2048 * 1024 * 4 / 450e9)


def test_data_parallel_divides_the_batch_and_moves_nothing_forward() -> None:
    block = ncd.nn.transformer_block().over("batch")
    block = block.bind(batch=8, seq=256, d_model=256, heads=4, d_head=64, d_ff=1024)
    one = ncd_perf.cost(block, H100)
    dp = ncd_perf.cost(block, H100.with_devices(8), parallel={"batch": 8})
    assert float(dp.flops["matrix"]) * 8 == pytest.approx(float(one.flops["matrix"]))
    assert not [c for k in dp.kernels for c in k.collectives]
