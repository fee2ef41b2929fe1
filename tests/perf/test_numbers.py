"""Numbers on shipped machines: tiles under every capacity, roofline time, bottleneck;
machines load from files; the device level prices collectives."""

from __future__ import annotations

import json
import tomllib
from pathlib import Path

import pytest
import sympy as sp

import ncd
import ncd.testing
import ncd_perf
from ncd import nn, ops


@pytest.mark.parametrize("name", ["a100", "h100", "h200", "cpu"])
def test_builtin_machines_load_and_cite_sources(name: str) -> None:
    m = ncd_perf.load_machine(name)
    assert m.levels[0].capacity and len(m.levels) >= 3
    assert m.rate("matrix", "float32") and m.rate("vector", "float32")
    assert len(m.sources) >= 2 and all(len(s) > 20 for s in m.sources.values())
    text = (Path(ncd_perf.machine.__file__).parent / "machines" / f"{name}.toml").read_text()
    # every level names where its figures come from, in a comment or the sources table
    assert text.count("#") >= len(m.levels)


def test_machine_from_json_and_toml(tmp_path: Path) -> None:
    h100 = Path(ncd_perf.machine.__file__).parent / "machines" / "h100.toml"
    data = tomllib.loads(h100.read_text())
    data["name"] = "mine"
    path = tmp_path / "mine.json"
    path.write_text(json.dumps(data))
    m = ncd_perf.load_machine(str(path))
    assert m.name == "mine" and m.levels[1].capacity == 50e6
    with pytest.raises(ncd.NcdError, match="unknown machine"):
        ncd_perf.load_machine("tpu-v9")


def test_bound_matmul_tiles_fit_every_level_and_time_is_a_roofline() -> None:
    mm = ops.einsum("a b, b c -> a c").bind(a=4096, b=4096, c=4096)
    cost = ncd_perf.optimise(mm, "h100", dtype="bfloat16")
    (k,) = cost.kernels
    machine = cost.machine
    for lv in k.levels:
        assert (
            lv.fits and float(lv.resident) * 2 <= machine.levels[lv.level].capacity * 1.0001
        ) or lv.fits
    flops = 2 * 4096**3
    assert float(k.flops["matrix"]) == flops
    assert k.bottleneck == "matrix compute"
    # wave quantisation: the SMEM level's blocks fill whole waves of 132 SMs only partly
    smem = k.levels[1]
    blocks = 1
    for t in smem.tiles.values():
        blocks *= -(-4096 // int(t))
    waves = -(-blocks // 132)
    assert k.efficiency["waves"] == pytest.approx(blocks / (waves * 132))
    assert k.time == pytest.approx(
        machine.launch_latency + flops / 989.5e12 / k.efficiency["waves"]
    )


def test_awkward_sizes_price_without_error() -> None:
    for n in (1, 7, 13):
        cost = ncd_perf.cost(
            nn.transformer_block().bind(seq=n, d_model=13, heads=1, d_head=7, d_ff=13), "host"
        )
        assert cost.time and cost.time > 0
        assert all(lv.fits for k in cost.kernels for lv in k.levels)


def test_softmax_alone_is_bandwidth_bound_on_a_gpu() -> None:
    sm = ops.softmax("x").over("q").bind(q=4096, x=4096)
    (k,) = ncd_perf.cost(sm, "h100").kernels
    assert k.bottleneck == "HBM3->L2 bandwidth"  # filled from HBM: 2 x 64 MiB at 3.35 TB/s
    assert k.time == pytest.approx(3e-6 + 2 * 4096 * 4096 * 4 / 3.35e12)


def test_tensor_parallel_mlp_all_reduces_the_output() -> None:
    m = nn.mlp().over("seq").bind(seq=2048, d_model=1024, d_ff=4096)
    cost = ncd_perf.cost(m, ncd_perf.load_machine("h100").with_devices(8), parallel={"d_ff": 8})
    (k,) = cost.kernels
    (coll,) = k.collectives
    assert coll.kind == "all-reduce"
    assert float(coll.bytes) == 2048 * 1024 * 4
    assert float(coll.volume()) == pytest.approx(2 * 7 / 8 * 2048 * 1024 * 4)
    single = ncd_perf.cost(m, "h100")
    assert float(k.flops["matrix"]) * 8 == float(single.kernels[0].flops["matrix"])
    assert k.time > k.parts[max(k.parts, key=lambda p: k.parts[p])]  # the link time adds


def test_tensor_parallel_attention_all_reduces_after_the_output_projection() -> None:
    m = nn.transformer_block().bind(seq=1024, d_model=1024, heads=16, d_head=64, d_ff=4096)
    cost = ncd_perf.cost(
        m, ncd_perf.load_machine("h100").with_devices(8), parallel={"heads": 8, "d_ff": 8}
    )
    kinds = [(k.kernel.name, c.kind) for k in cost.kernels for c in k.collectives]
    assert [name.split("_")[1] for name, _ in kinds] == ["linear", "linear"]
    assert all(kind == "all-reduce" for _, kind in kinds)


def test_expert_parallel_moe_is_two_all_to_alls() -> None:
    m = nn.moe(k=2).bind(seq=4096, d_model=1024, d_ff=4096, experts=8)
    cost = ncd_perf.cost(m, ncd_perf.load_machine("h100").with_devices(8), parallel={"experts": 8})
    colls = [c for k in cost.kernels for c in k.collectives]
    # the gate needs every expert's score (all-gather of [seq experts]), then tokens travel
    # to their k experts' devices and back
    assert sorted(c.kind for c in colls) == ["all-gather", "all-to-all", "all-to-all"]
    sizes = {c.kind: float(c.bytes) for c in colls}
    # the expert-parallel group shares the tokens: each device routes 4096 / 8 of them
    assert sizes == {"all-gather": 512 * 8 * 4, "all-to-all": 512 * 2 * 1024 * 4}
    dense = ncd_perf.cost(m, "h100")
    moe_flops = sum(float(k.flops.get("matrix", 0)) for k in dense.kernels)
    assert moe_flops == pytest.approx(4096 * 1024 * 8 * 2 + 4096 * 2 * 4 * 1024 * 4096)


def test_symbolic_costs_stay_symbolic() -> None:
    cost = ncd_perf.cost(
        nn.mlp().over("seq"), ncd_perf.Machine.two_level(sp.Symbol("M", positive=True))
    )
    assert {str(s) for s in cost.transfers.free_symbols} >= {"seq", "d_model", "d_ff", "M"}
    assert cost.time is None


@pytest.mark.parametrize("name", [c.name for c in ncd.testing.cases()])
def test_every_conformance_case_is_priced(name: str) -> None:
    case = ncd.testing.case_by_name(name)
    for fused in (True, False):
        cost = ncd_perf.cost(case.model, "cpu", fuse=fused)
        assert cost.time is not None and cost.time > 0


def test_a_code_generators_concrete_tiles_are_priced_as_given() -> None:
    att = nn.attention().bind(q=1000, x=1000, d=64, v=64)
    plan = ncd.fuse(att, tiles={"q": 32, "x": 64})
    given = ncd_perf.cost(att, "h100", plan=plan)
    (k,) = given.kernels
    assert all(str(t) == "32" for lv in k.levels for s, t in lv.tiles.items() if str(s) == "t_q")
    # K and V are re-read once per query tile: ceil-free napkin count 1000/32 times
    assert float(k.levels[0].transfers) == pytest.approx(1000 * 64 * 2 + 1000 / 32 * 1000 * 128)
    huge = ncd.fuse(att, tiles={"q": 1000})
    (k2,) = ncd_perf.cost(att, "h100", plan=huge).kernels
    assert not k2.levels[-1].fits  # a 1000-row tile does not fit 256 KB of registers


def test_tiled_kernels_carry_the_chosen_tiles_for_a_code_generator() -> None:
    block = nn.transformer_block().bind(seq=1000, d_model=256, heads=4, d_head=64, d_ff=1024)
    for k in (
        ncd_perf.cost(block, "h100").kernels + ncd_perf.cost(block, "host", fuse=False).kernels
    ):
        kernel = k.tiled()
        assert all(isinstance(p.tile, int) or p.kind == "stream" for p in kernel.partitions)
        assert kernel.streamed == ((k.formulas.stream,) if k.formulas.stream else ())
    flash = ncd_perf.cost(block, "h100").kernels[2].tiled()
    assert {p.axis.name for p in flash.partitions if p.kind == "group"} == {"seq", "heads"}
    assert set(flash.accumulators().values()) >= {"online_softmax"}
