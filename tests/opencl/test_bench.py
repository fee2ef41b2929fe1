"""``ncd.bench`` / ``ncd bench``: a schedule timed kernel by kernel beside its prediction, with
its outputs checked against the reference."""

from __future__ import annotations

import pytest

import ncd
from ncd import nn, ops
from ncd.cli import main, parse_tiles


def _attention() -> ncd.Term:
    return nn.attention(causal=True).bind(q=37, x=37, d=16, v=16)


def test_bench_times_every_kernel_of_the_plan_and_checks_outputs() -> None:
    gpt = nn.gpt(layers=1).bind(seq=13, d_model=32, heads=2, d_head=16, d_ff=64, vocab=29)
    report = ncd.bench(gpt, "opencl", reps=1)
    plan = ncd.plan(gpt, target="opencl")
    assert [r.kernel for r in report.rows] == [k.name for k in plan.kernels]
    assert report.agrees
    assert all(r.seconds > 0 for r in report.rows)
    assert "agree with the reference" in str(report) and "total" in str(report)


def test_tiles_change_the_schedule_that_is_timed() -> None:
    att = _attention()
    default = ncd.bench(att, "opencl", reps=1)
    chunked = ncd.bench(att, "opencl", tiles={("x", 0): 8}, reps=1)
    assert "stream(x/8@L0)" in chunked.rows[0].choices
    assert default.rows[0].choices != chunked.rows[0].choices
    assert chunked.agrees


def test_bad_requests_are_schedule_errors() -> None:
    att = _attention()
    with pytest.raises(ncd.ScheduleError, match="still free"):
        ncd.bench(ops.softmax("x").over("r"), "opencl")
    with pytest.raises(ncd.ScheduleError, match="one by one"):
        ncd.bench(att, "reference")
    with pytest.raises(ncd.ScheduleError, match="plan= and tiles="):
        ncd.bench(att, "opencl", plan=ncd.plan(att, target="opencl"), tiles={("x", 0): 8})


def test_parse_tiles() -> None:
    assert parse_tiles(["x@0=64", "k*_einsum*:seq@1=2", "d=8"]) == {
        ("x", 0): 64,
        ("k*_einsum*", "seq", 1): 2,
        "d": 8,
    }
    for bad in ("x@0", "x@a=3", "=4", "x=y"):
        with pytest.raises(ncd.NcdError, match="AXIS"):
            parse_tiles([bad])


def test_cli_bench_prints_measured_beside_predicted(capsys: pytest.CaptureFixture[str]) -> None:
    args = ["bench", "attention", "--bind", "q=16", "x=16", "d=8", "v=8", "--reps", "1"]
    assert main([*args, "--tiles", "x@0=8"]) == 0
    out = capsys.readouterr().out
    assert "measured" in out and "stream(x/8@L0)" in out
