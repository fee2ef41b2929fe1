"""Seeded dropout exports to torch drawing the reference's mask (``ncd.counter_rng``), and
torch.autograd through it agrees with ``ncd.grad``."""

from __future__ import annotations

import numpy as np
import pytest
import torch

import ncd
import ncd_torch
from ncd import ops


@pytest.mark.parametrize("n", [1, 7, 13, 301])
def test_the_exported_mask_is_the_references(n: int) -> None:
    a, b = ncd.Axis("a", size=n), ncd.Axis("b", size=3)
    model = ncd.identity(ncd.ArrayType((a, b))) >> ops.dropout(0.3, seed=5)
    x = np.random.default_rng(n).standard_normal((n, 3)).astype(np.float32)
    want = ncd.run(model, x)
    got = ncd.compile(model, "torch")(x)
    np.testing.assert_array_equal(got == 0, want == 0)
    np.testing.assert_allclose(got, want, rtol=1e-6)
    # eval() does not switch a seeded dropout off: its seed says it is on
    module = ncd_torch.to_module(model).eval()
    with torch.no_grad():
        np.testing.assert_allclose(module(torch.from_numpy(x)).numpy(), want, rtol=1e-6)


def test_lifted_behind_a_linear_map_and_differentiated() -> None:
    s, d, e = ncd.Axis("s", size=13), ncd.Axis("d", size=7), ncd.Axis("e", size=5)
    body = ncd.identity(ncd.ArrayType((s, d))) >> ops.linear(d, e) >> ops.dropout(0.4, seed=3)
    model = body.over(ncd.Axis("batch", size=2)) >> ops.unary("tanh") >> ops.sum(["batch", s, e])
    params = {k: v.astype(np.float64) for k, v in ncd.init(model, seed=0).items()}
    x = np.random.default_rng(0).standard_normal((2, 13, 7))
    loss, grads = ncd.run(ncd.grad(model), x, params=params)
    module = ncd_torch.to_module(model, params=params, dtype=torch.float64)
    out = module(torch.from_numpy(x))
    out.backward()
    assert float(out.detach()) == pytest.approx(float(loss), rel=1e-12)
    named = dict(module.named_parameters())
    for k, g in grads.items():
        np.testing.assert_allclose(named[k].grad.numpy(), g, rtol=1e-10, atol=1e-12)
    # and the gradient model itself, exported
    exported = ncd.compile(ncd.grad(model), "torch")(x, params=params)
    for k, g in grads.items():
        np.testing.assert_allclose(exported[1][k], g, rtol=1e-10, atol=1e-12)
