"""The ``ncd demo`` step: export, load ``ctx["params"]``, compare with the reference logits."""

import numpy as np
import pytest

import ncd
from ncd_torch._backend import demo_step


def _ctx():
    model = ncd.nn.gpt(layers=1).bind(seq=7, d_model=8, heads=2, d_head=4, d_ff=13, vocab=11)
    params = ncd.init(model, seed=0)
    tokens = np.random.default_rng(0).integers(0, 11, 7)
    return {
        "model": model,
        "params": params,
        "tokens": tokens,
        "logits": ncd.run(model, tokens, params=params),
    }


def test_demo_step_agrees(capsys):
    ctx = _ctx()
    demo_step(ctx)
    out = capsys.readouterr().out
    assert "max |torch - reference|" in out and "torch_module" in ctx


def test_demo_step_fails_beyond_tolerance():
    ctx = _ctx()
    ctx["logits"] = ctx["logits"] + 1.0
    with pytest.raises(AssertionError, match="disagrees"):
        demo_step(ctx)
