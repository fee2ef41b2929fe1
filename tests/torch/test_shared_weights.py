"""Modules called more than once (weight-shared layers: ALBERT applies one layer at every
depth) import with one parameter per torch parameter. A square Linear maps an axis to itself
at each call, so the second call reads the first one's output and a residual add meets its
input; a LayerNorm or RMSNorm called twice reads its weight and bias as values. The values,
OpenCL, the export with the original state dict and the shared weight's gradient (the sum over
calls) match torch; HF ``AlbertModel`` is the acceptance."""

from __future__ import annotations

import importlib.util

import numpy as np
import pytest
import torch
from torch import nn

import ncd
from ncd_torch import from_torch, to_module

OPENCL = importlib.util.find_spec("ncd_opencl") is not None


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


class NormTwice(nn.Module):
    def __init__(self, d: int = 13) -> None:
        super().__init__()
        self.n, self.r = nn.LayerNorm(d), nn.RMSNorm(d)
        self.l = nn.Linear(d, 2 * d)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = self.r(self.n(self.l(self.n(x)).relu()[..., : x.shape[-1]]))
        return self.r(y + self.n(x))


def test_norms_called_twice_keep_one_weight() -> None:
    torch.manual_seed(1)
    module = NormTwice().eval()
    with torch.no_grad():
        for p in module.parameters():
            p.normal_()  # not the ones and zeros a fresh norm holds
    x = torch.randn(2, 7, 13)
    result = from_torch(module, (x,))
    assert len(result.params) == len(list(module.parameters()))
    want = module(x).detach().numpy()
    assert np.abs(ncd.run(result.model, x.numpy(), params=result.params) - want).max() < 1e-5
    if OPENCL:
        got = ncd.compile(result.model, "opencl")(x.numpy(), params=result.params)
        assert np.abs(got - want).max() < 1e-5
    back = to_module(result.model)
    back.load_state_dict(module.state_dict())
    assert np.abs(back(x).detach().numpy() - want).max() < 1e-5


def test_hf_albert_shares_one_layer_across_depth() -> None:
    transformers = pytest.importorskip("transformers")
    cfg = transformers.AlbertConfig(
        vocab_size=50,
        embedding_size=16,
        hidden_size=32,
        num_hidden_layers=3,
        num_attention_heads=4,
        intermediate_size=48,
        max_position_embeddings=32,
        attn_implementation="eager",
    )
    torch.manual_seed(2)
    hf = transformers.AlbertModel(cfg).eval()

    class Hidden(nn.Module):
        def __init__(self, m: nn.Module) -> None:
            super().__init__()
            self.m = m

        def forward(self, ids: torch.Tensor) -> torch.Tensor:
            return self.m(input_ids=ids).last_hidden_state  # type: ignore[no-any-return]

    wrapped = Hidden(hf)
    ids = torch.randint(0, 50, (2, 9))
    result = from_torch(wrapped, (ids,))
    assert len(result.params) == len(list(wrapped.parameters()))  # one layer's weights
    for i in (ids, torch.randint(0, 50, (3, 13))):
        want = wrapped(i).detach().numpy()
        assert np.abs(ncd.run(result.model, i.numpy(), params=result.params) - want).max() < 1e-5
        if OPENCL:
            got = ncd.compile(result.model, "opencl")(i.numpy(), params=result.params)
            assert np.abs(got - want).max() < 1e-4
    back = to_module(result.model)
    back.load_state_dict(wrapped.state_dict())
    assert np.abs(back(ids).detach().numpy() - wrapped(ids).detach().numpy()).max() < 1e-5
