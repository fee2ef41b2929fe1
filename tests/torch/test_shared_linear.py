"""A square Linear called more than once (a weight-shared layer, as ALBERT and universal
transformers apply one block repeatedly) imports as one parameter: each call maps an axis to
itself, so the second call reads the first one's output and a residual add meets its input;
the values, the export with the original state dict and the shared weight's gradient (the
sum over calls) match torch."""

from __future__ import annotations

import numpy as np
import torch
from torch import nn

import ncd
from ncd_torch import from_torch, to_module


class Twice(nn.Module):
    def __init__(self, d: int = 8, bias: bool = True) -> None:
        super().__init__()
        self.l = nn.Linear(d, d, bias=bias)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.l(torch.tanh(self.l(x))) + x


def test_a_linear_called_twice_is_one_parameter_and_matches_torch() -> None:
    for d, bias in ((8, True), (13, False), (1, True)):
        torch.manual_seed(d)
        module = Twice(d, bias).eval()
        x = torch.randn(2, 7, d)
        result = from_torch(module, (x,))
        assert len(result.params) == len(list(module.parameters()))
        want = module(x).detach().numpy()
        got = ncd.run(result.model, x.numpy(), params=result.params)
        assert np.abs(got - want).max() < 1e-5, (d, bias)
        x2 = torch.randn(3, 13, d)  # free batch and length
        got2 = ncd.run(result.model, x2.numpy(), params=result.params)
        assert np.abs(got2 - module(x2).detach().numpy()).max() < 1e-5
        back = to_module(result.model)
        back.load_state_dict(module.state_dict())
        assert np.abs(back(x).detach().numpy() - want).max() < 1e-5


def test_the_shared_weight_gets_the_sum_of_both_calls_gradients() -> None:
    torch.manual_seed(0)
    module = Twice(8).double().eval()
    x = torch.randn(2, 7, 8, dtype=torch.float64)
    result = from_torch(module, (x,))
    model = result.model.bind(batch=2, seq=7) >> ncd.ops.sum(["batch", "seq", "d_model"])
    names = {k.split(".", 1)[1]: k for k in ncd.init(model, seed=0)}
    params = {names[k]: v for k, v in result.params.items()}
    _, grads = ncd.run(ncd.grad(model), x.numpy(), params=params)
    module(x).sum().backward()
    weight = next(k for k in result.params if result.torch_names[k] == "l.weight")
    assert module.l.weight.grad is not None
    np.testing.assert_allclose(grads[names[weight]], module.l.weight.grad.numpy(), atol=1e-10)
