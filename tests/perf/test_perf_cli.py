"""``ncd perf``, ``ncd calibrate``, the demo step and the plugin registrations."""

from __future__ import annotations

from pathlib import Path

import pytest

import ncd
from ncd.cli import main
from ncd.plugins import registry


def test_registrations() -> None:
    reg = registry()
    assert "perf" in reg.cost_models and {"perf", "calibrate"} <= set(reg.commands)
    assert any(s.order == 40 for s in reg.demo_steps)
    result = reg.cost_models["perf"].cost(ncd.nn.attention().bind(q=64, x=64, d=16, v=16), "a100")
    assert len(result.kernels) == 1


def test_ncd_perf_prints_table_formulas_and_plots(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    png = tmp_path / "roofline.png"
    rc = main(
        [
            "perf",
            "block",
            "--machine",
            "h100",
            "--bind",
            "seq=512",
            "d_model=256",
            "heads=4",
            "d_head=64",
            "d_ff=1024",
            "--plot",
            str(png),
        ]
    )
    out = capsys.readouterr().out
    assert rc == 0
    assert "fusion plan: 6 kernel(s)" in out and "HBM3" in out and "total time" in out
    assert "derived formulas" in out and "H = " in out and "streaming seq_k" in out
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_ncd_perf_unfused_parallel_and_bad_machine(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["perf", "mlp", "--machine", "cpu", "--unfused", "--no-formulas"]) == 0
    assert (
        main(
            [
                "perf",
                "block",
                "--machine",
                "h100",
                "--parallel",
                "heads=4",
                "--no-formulas",
                "--bind",
                "seq=64",
                "d_model=64",
                "heads=4",
                "d_head=16",
                "d_ff=128",
            ]
        )
        == 0
    )
    assert "all-reduce" in capsys.readouterr().out
    assert main(["perf", "mlp", "--machine", "abacus"]) == 2
    assert "unknown machine" in capsys.readouterr().err


def test_calibrate_shows_the_host_and_writes_it_as_a_machine_file(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    import ncd_perf

    out = tmp_path / "here.toml"
    assert main(["calibrate", "-o", str(out)]) == 0
    text = capsys.readouterr().out
    assert "GB/s" in text and "write-allocate" in text and "erf" in text
    assert ncd_perf.detect().model in text
    m = ncd_perf.load_machine(str(out))
    host = ncd_perf.load_machine("host")
    assert [lv.name for lv in m.levels] == [lv.name for lv in host.levels]
    assert m.levels[1].bandwidth == host.levels[1].bandwidth
    assert m.rate("erf", "float32") == host.rate("erf", "float32")


def test_demo_step_prices_the_demo_gpt(capsys: pytest.CaptureFixture[str]) -> None:
    gpt = ncd.nn.gpt(layers=1)
    model = gpt.bind(seq=64, d_model=128, heads=4, d_head=32, d_ff=512, vocab=256)
    (step,) = [s for s in registry().demo_steps if s.order == 40]
    step.run({"model": model, "unbound": gpt})
    out = capsys.readouterr().out
    assert "performance model on h100" in out and "performance model on host" in out
    assert "derived formulas" in out
