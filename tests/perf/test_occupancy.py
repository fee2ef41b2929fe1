"""Occupancy from compiled resources: the CUDA occupancy calculator's arithmetic per machine."""

from __future__ import annotations

import pytest

from ncd import nn
from ncd_perf.machine import load_machine
from ncd_perf.model import cost
from ncd_perf.occupancy import occupancy
from ncd_perf.report import table


@pytest.mark.parametrize(
    ("threads", "registers", "shared", "blocks", "warps", "limiter"),
    [
        # 231 registers: 29 x 256 per warp, 4 warps a block -> 2 blocks of 65536 registers
        (128, 231, 0, 2, 8, "registers"),
        # 80 registers, 10 KB static shared memory (the tensor-core matmul): registers bind
        (128, 80, 10240, 6, 24, "registers"),
        # 48 KB of shared memory + 1 KB reserved per block: 233472 // 50176 = 4 blocks
        (128, 32, 48 * 1024, 4, 16, "shared memory"),
        # 1024-thread blocks: 2048 resident threads allow 2
        (1024, 32, 0, 2, 64, "threads"),
        # small blocks hit the 32-block limit first
        (64, 16, 0, 32, 64, "blocks"),
    ],
)
def test_residency_on_hopper(
    threads: int, registers: int, shared: int, blocks: int, warps: int, limiter: str
) -> None:
    o = occupancy(load_machine("h200"), threads, registers, shared)
    assert o is not None
    assert (o.blocks, o.warps, o.limiter) == (blocks, warps, limiter)
    assert o.fraction == pytest.approx(warps / 64)


def test_ampere_has_less_shared_memory() -> None:
    a100, h100 = load_machine("a100"), load_machine("h100")
    a = occupancy(a100, 128, 32, 48 * 1024)
    h = occupancy(h100, 128, 32, 48 * 1024)
    assert a is not None and h is not None and a.blocks == 3 < h.blocks == 4


def test_a_block_that_cannot_fit_is_zero_blocks() -> None:
    o = occupancy(load_machine("h100"), 128, 32, 240 * 1024)
    assert o is not None and o.blocks == 0 and o.limiter == "shared memory"


def test_machines_without_sms_have_no_occupancy() -> None:
    assert occupancy(load_machine("cpu"), 128, 32) is None


def test_cost_reports_the_occupancy_of_the_kernels_given() -> None:
    model = nn.mlp().bind(d_model=64, d_ff=256)
    plan_cost = cost(model, "h200")
    name = plan_cost.kernels[0].kernel.name
    priced = cost(model, "h200", resources={name: {"threads": 128, "registers": 231}})
    assert priced.kernels[0].occupancy is not None
    assert priced.kernels[0].occupancy.limiter == "registers"
    assert "2 blocks/SM, 8 warps (12%), limited by registers" in table(priced)
    assert all(k.occupancy is None for k in plan_cost.kernels)
