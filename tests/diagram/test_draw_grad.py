"""``ncd draw`` on a gradient model (``ncd.grad``): the backward pass of attention drawn as the
forward reversed, its definitions kept as ``<name> (<name>_grad)`` blocks."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

MODEL = """
import ncd
from ncd import nn, ops
att = nn.attention(causal=True).bind(q=5, x=5, d=4, v=4) >> ops.sum(["q", "v"])
backward = ncd.grad(att, wrt="inputs")
"""


def test_ncd_draw_of_attentions_backward(tmp_path: Path) -> None:
    (tmp_path / "attgrad.py").write_text(MODEL)
    out = tmp_path / "att.svg"
    r = subprocess.run(
        [sys.executable, "-m", "ncd.cli", "draw", "attgrad:backward", "-o", str(out)],
        capture_output=True,
        text=True,
        cwd=tmp_path,
    )
    assert r.returncode == 0, r.stderr
    svg = out.read_text()
    assert "attention_grad" in svg and "softmax" in svg and "causal_mask" in svg
