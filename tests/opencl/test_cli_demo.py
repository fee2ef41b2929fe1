"""``ncd compile --target opencl --emit`` and the demo step."""

from __future__ import annotations

import json

import numpy as np
import pytest

import ncd
from ncd.cli import main
from ncd.plugins import registry

pytest.importorskip("pyopencl")


def test_compile_emit_writes_sources_and_plan_with_bytes(tmp_path, capsys) -> None:
    out = tmp_path / "out"
    code = main(
        [
            "compile",
            "attention",
            "--bind",
            "q=13",
            "x=13",
            "d=8",
            "v=8",
            "--target",
            "opencl",
            "--emit",
            str(out),
        ]
    )
    assert code == 0
    plan = json.loads((out / "plan.json").read_text())
    (k,) = plan["kernels"]
    # Q, K, V read once (3 x 13 x 8 floats) and the output written once
    want = {"read": 3 * 13 * 8 * 4, "written": 13 * 8 * 4, "total": 4 * 13 * 8 * 4}
    assert {n: k["bytes"][n] for n in want} == want
    assert (out / f"{k['name']}.cl").read_text().startswith("//")
    assert "__kernel" in (out / "program.cl").read_text()
    assert "1 OpenCL kernel(s)" in capsys.readouterr().out


def test_demo_step_prints_difference_and_kernel_count(capsys) -> None:
    (step,) = [s for s in registry().demo_steps if s.name.startswith("opencl")]
    assert step.order == 50
    model = ncd.nn.gpt(layers=1).bind(seq=8, d_model=16, heads=2, d_head=8, d_ff=32, vocab=13)
    params = ncd.init(model)
    tokens = np.arange(8) % 13
    step.run(
        {
            "model": model,
            "params": params,
            "tokens": tokens,
            "logits": ncd.run(model, tokens, params=params),
        }
    )
    text = capsys.readouterr().out
    assert "kernels" in text and "max |logits - reference|" in text
