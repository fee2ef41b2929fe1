"""Efficiency terms and rate tables: the overlap policy, write-allocate, wave quantisation, rates
per op class and format, and the errors for what a machine cannot price."""

from __future__ import annotations

import importlib.util

import attrs
import pytest

import ncd
import ncd_perf
from ncd import nn, ops
from ncd_perf.machine import Level, Machine


def _toy(**changes: object) -> Machine:
    base = Machine(
        "toy",
        (Level("DRAM"), Level("cache", 1e6, 10e9, write_factor=1.0)),
        {"matrix": {"float32": 100e9}, "vector": {"float32": 10e9}, "special": {"float32": 1e9}},
        launch_latency=1e-6,
    )
    return attrs.evolve(base, **changes)


def test_overlap_max_is_the_roofline_and_sum_adds_every_part() -> None:
    sm = ops.softmax("x").over("r").bind(r=256, x=256)
    (k,) = ncd_perf.cost(sm, _toy()).kernels
    assert set(k.parts) == {
        "special compute",
        "vector compute",
        "reduce compute",
        "DRAM->cache bandwidth",
    }
    assert k.time == pytest.approx(1e-6 + max(k.parts.values()))
    (s,) = ncd_perf.cost(sm, _toy(), overlap="sum").kernels
    assert s.time == pytest.approx(1e-6 + sum(k.parts.values()))
    (m,) = ncd_perf.cost(sm, _toy(overlap="sum")).kernels  # the machine's own policy
    assert m.time == s.time
    with pytest.raises(ncd.NcdError, match=r"overlap='avg'.*max, sum"):
        ncd_perf.cost(sm, "h100", overlap="avg")


def test_a_write_allocating_level_charges_written_bytes_twice() -> None:
    sm = ops.softmax("x").over("r").bind(r=256, x=256)
    (plain,) = ncd_perf.cost(sm, _toy()).kernels
    wa = _toy(levels=(Level("DRAM"), Level("cache", 1e6, 10e9, write_factor=2.0)))
    (k,) = ncd_perf.cost(sm, wa).kernels
    nbytes = 256 * 256 * 4
    assert float(k.levels[0].written) == nbytes and float(k.levels[0].bytes) == 2 * nbytes
    assert k.levels[0].time == pytest.approx(3 * nbytes / 10e9)
    assert plain.levels[0].time == pytest.approx(2 * nbytes / 10e9)


def test_wave_quantisation_counts_the_last_waves_idle_slots() -> None:
    h100 = ncd_perf.load_machine("h100")
    mm = ops.einsum("a b, b c -> a c").bind(a=4096, b=4096, c=4096).cast(ncd.bfloat16)
    (k,) = ncd_perf.cost(mm, h100).kernels
    blocks = 1
    for t in k.levels[1].tiles.values():
        blocks *= -(-4096 // int(t))
    assert k.efficiency["waves"] == pytest.approx(blocks / (-(-blocks // 132) * 132))
    # a CPU has no waves
    assert ncd_perf.cost(mm, "cpu").kernels[0].efficiency == {}
    # two resident blocks per SM double the slots of a wave (a plan of ncd-cuda's, if installed)
    if importlib.util.find_spec("ncd_cuda") is None:
        return
    plan = ncd.plan(mm, target="cuda")
    res = {kk.name: {"threads": 128, "registers": 64, "shared_bytes": 0} for kk in plan.kernels}
    (occ,) = ncd_perf.cost(mm, h100, plan=plan, resources=res).kernels
    assert occ.occupancy is not None and occ.occupancy.blocks >= 2
    n = 1
    for tile, size in occ.formulas.group_sizes().items():
        n *= -(-int(size) // int(occ.levels[1].tiles[tile]))
    slots = 132 * occ.occupancy.blocks
    assert occ.efficiency.get("waves", 1.0) == pytest.approx(n / (-(-n // slots) * slots))


def test_rates_per_op_class_and_format() -> None:
    h100 = ncd_perf.load_machine("h100")
    assert h100.rate("special", "float64") == pytest.approx(34e12 / 20)
    assert h100.rate("special", "bfloat16") == h100.rate("special", "float32") == 3.9e12
    # erf has no unit of its own on a GPU: priced as special; the host measures its own
    assert h100.rate("erf", "float32") == 3.9e12
    host = ncd_perf.load_machine("host")
    assert host.rate("erf", "float32") != host.rate("special", "float32")
    # float8 formats take the float8 rate
    assert h100.rate("matrix", "float8_e4m3") == 1979e12
    with pytest.raises(ncd.errors.UnknownDTypeError, match="float7"):
        h100.rate("matrix", "float7")
    mlp = nn.mlp().over("s").bind(s=64, d_model=32, d_ff=128)
    assert "erf" in ncd_perf.cost(mlp, "h100").flops  # exact GELU


def test_an_unknown_dtype_is_a_typed_error_not_a_key_error() -> None:
    mm = ops.einsum("a b, b c -> a c").bind(a=8, b=8, c=8)
    with pytest.raises(ncd.NcdError, match="float7"):
        ncd_perf.cost(mm, "h100", dtype="float7")
