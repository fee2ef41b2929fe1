"""A gradient model (``ncd.grad``) exports to torch like any model: its outputs are the loss
and the gradients, the reference's to float32 rounding."""

from __future__ import annotations

import numpy as np
import torch

import ncd
import ncd_torch
from ncd import nn


def test_the_gradients_of_a_gpt_export_and_agree() -> None:
    gpt = nn.gpt(layers=1).bind(seq=7, d_model=16, heads=2, d_head=8, d_ff=32, vocab=11)
    lm = gpt >> nn.cross_entropy()
    train = ncd.grad(lm)
    params = ncd.init(lm, seed=0)
    toks, tgts = np.arange(7) % 11, (np.arange(7) + 3) % 11
    loss, grads = ncd.run(train, toks, tgts, params=params)
    module = ncd_torch.to_module(train, params=params)
    out = [o.detach().numpy() for o in module(torch.tensor(toks), torch.tensor(tgts))]
    assert len(out) == 1 + len(grads)
    np.testing.assert_allclose(out[0], loss, rtol=1e-5, atol=1e-6)
    for got, (name, want) in zip(out[1:], grads.items(), strict=True):
        # (a gradient that is zero in exact arithmetic, the key bias's, is float32 noise)
        scale = float(np.max(np.abs(want)))
        assert float(np.max(np.abs(got - want))) <= 1e-4 * scale + 1e-6, name
