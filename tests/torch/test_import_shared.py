"""A module called more than once shares its parameters on import (issue 12): a conv, a
train-mode batch norm's affine map and an LSTM read their one parameter again through a view,
so ``ncd.grad`` sums both uses' gradients as autograd does (two copies would train apart)."""

from __future__ import annotations

import importlib.util
from typing import Any

import numpy as np
import torch
from torch import nn

import ncd
from ncd_torch import from_torch


class Twice(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.conv = nn.Conv1d(3, 3, 3, padding=1)
        self.bn = nn.BatchNorm1d(3)
        self.rnn = nn.GRU(3, 3)

    def forward(self, z: torch.Tensor) -> Any:
        y = self.bn(self.conv(torch.relu(self.bn(self.conv(z)))))
        seq = y.permute(2, 0, 1)  # (length, batch, channels)
        out, _ = self.rnn(self.rnn(seq)[0])
        return y, out


def test_a_module_called_twice_has_one_set_of_parameters_and_torchs_gradients() -> None:
    torch.manual_seed(4)
    module = Twice().double().train()
    z = torch.randn(2, 3, 13, dtype=torch.float64)
    imported = from_torch(module, (z,))
    model, params = imported
    trained = {k for k, _ in module.named_parameters()}
    assert set(imported.torch_names.values()) == trained
    assert len(params) == len(trained)
    ys = module(z)
    rs = [torch.randn_like(y) for y in ys]
    sum((y * r).sum() for y, r in zip(ys, rs, strict=True)).backward()
    outs, grads = ncd.run(
        ncd.grad(model, cotangents=True), z.numpy(), *(r.numpy() for r in rs), params=params
    )
    for a, b in zip(outs, ys, strict=True):
        np.testing.assert_allclose(a, b.detach().numpy(), atol=1e-12)
    named = dict(module.named_parameters())
    for name, g in grads.items():
        want = named[imported.torch_names[name]].grad.numpy()
        np.testing.assert_allclose(g, want.reshape(g.shape), atol=1e-10, err_msg=name)
    back = imported.to_module().double().train()
    back.load_state_dict(module.state_dict())
    with torch.no_grad():
        for a, b in zip(back(z), ys, strict=True):
            np.testing.assert_allclose(a.numpy(), b.detach().numpy(), atol=1e-12)
    if importlib.util.find_spec("ncd_opencl") is not None:
        p32 = {k: v.astype(np.float32) for k, v in params.items()}
        got = ncd.compile(model, "opencl")(z.numpy().astype(np.float32), params=p32)
        for a, b in zip(got, ys, strict=True):
            np.testing.assert_allclose(a, b.detach().numpy(), atol=1e-4)
