"""``x.detach()`` imports as ``ops.stop_gradient`` (it was an alias, so ``ncd.grad`` of an
import differentiated through it: a straight-through estimator got the rounding's zero
gradient instead of torch's identity)."""

from __future__ import annotations

import numpy as np
import torch
from torch import nn

import ncd
from ncd_torch import from_torch, to_module


class StraightThrough(nn.Module):
    """Rounding in the forward, the identity in the backward (VQ-VAE, quantisation-aware
    training): ``y + (round(y) - y).detach()``."""

    def __init__(self) -> None:
        super().__init__()
        self.lin = nn.Linear(13, 7)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = self.lin(x)
        q = torch.round(y * 4) / 4
        return (y + (q - y).detach()) ** 2


def test_a_straight_through_estimator_has_torchs_gradient() -> None:
    torch.manual_seed(0)
    module = StraightThrough().double()
    x = torch.randn(5, 13, dtype=torch.float64)
    imported = from_torch(module, (x,))
    model, params = imported
    assert "stop_gradient" in [getattr(n.op, "fn", "") for n in model.graph.nodes]
    y = module(x)
    r = torch.randn_like(y)
    (y * r).sum().backward()
    out, grads = ncd.run(ncd.grad(model, cotangents=True), x.numpy(), r.numpy(), params=params)
    np.testing.assert_allclose(out, y.detach().numpy(), atol=1e-12)
    torch_params = dict(module.named_parameters())
    for name, g in grads.items():
        want = torch_params[imported.torch_names[name]].grad.numpy()
        np.testing.assert_allclose(g, want.reshape(g.shape), atol=1e-12, err_msg=name)
    back = to_module(model)  # exported as detach: torch's autograd agrees too
    back.load_state_dict(module.state_dict())
    xb = x.clone().requires_grad_(True)
    (back(xb) * r).sum().backward()
    xt = x.clone().requires_grad_(True)
    (module(xt) * r).sum().backward()
    np.testing.assert_allclose(xb.grad.numpy(), xt.grad.numpy(), atol=1e-12)
