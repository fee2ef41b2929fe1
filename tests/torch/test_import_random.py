"""``from_torch`` of random draws in a forward (issue 15): ``torch.rand``/``randn``, their
``_like`` forms and ``bernoulli`` become ncd's counter-based draws (``ops.uniform``/``normal``/
``bernoulli``). They have torch's distributions but not its numbers (torch's global generator
is not read), and every ncd interpretation draws the same numbers: the reference, OpenCL and
the torch export."""

from __future__ import annotations

import importlib.util

import numpy as np
import pytest
import torch
from torch import nn

import ncd
from ncd_torch import from_torch, to_module


class Noisy(nn.Module):
    def __init__(self, how: str) -> None:
        super().__init__()
        self.how = how

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if self.how == "randn_like":
            return x + torch.randn_like(x)
        if self.how == "rand":
            return x + torch.rand(x.shape[-1])
        if self.how == "bernoulli_p":
            return x * x.bernoulli(0.3)
        return torch.bernoulli(torch.sigmoid(x))  # probabilities from the input


# (how, the mean and the variance of the result minus (or over) the input's part)
CASES = [("randn_like", 0.0, 1.0), ("rand", 0.5, 1 / 12), ("bernoulli_p", 0.3, 0.21)]


def _imported(how: str, shape: tuple[int, ...]) -> tuple:
    x = torch.zeros(*shape) + 1.0 if how == "bernoulli_p" else torch.zeros(*shape)
    model, params = from_torch(Noisy(how), (x,))
    assert any(n.op.kind == "random" for n in model.graph.nodes)
    return model, params, x.numpy()


@pytest.mark.parametrize(("how", "mean", "var"), CASES)
def test_draws_have_torchs_distribution(how: str, mean: float, var: float) -> None:
    model, params, x = _imported(how, (301, 13))
    y = np.asarray(ncd.run(model, x, params=params), np.float64)
    if how == "rand":  # one draw per feature, broadcast over the rows
        assert np.all(y == y[:1]) and np.all((y > 0) & (y < 1))
        y = y[:1]
    assert abs(y.mean() - mean) < 5 * np.sqrt(var / y.size)
    if y.size > 100:
        assert abs(y.var() - var) < 0.1 * var


def test_bernoulli_of_a_tensor_of_probabilities() -> None:
    model, params = from_torch(Noisy("bernoulli"), (torch.zeros(7, 13),))
    x = np.full((301, 13), -30.0, np.float32)
    x[:, :3] = 30.0  # sigmoid: 1 and 0 (not quite: 9e-14), and 0.5 in the middle column
    x[:, 6] = 0.0
    y = ncd.run(model, x, params=params)
    assert set(np.unique(y)) <= {0.0, 1.0}
    assert y[:, :3].all() and not y[:, 3:6].any() and not y[:, 7:].any()
    assert abs(y[:, 6].mean() - 0.5) < 5 * np.sqrt(0.25 / 301)


@pytest.mark.parametrize(("how", "mean", "var"), CASES)
def test_every_interpretation_draws_the_same_numbers(how: str, mean: float, var: float) -> None:
    model, params, x = _imported(how, (7, 13))
    ref = ncd.run(model, x, params=params)
    np.testing.assert_array_equal(ncd.run(model, x, params=params), ref)  # seeded, not stateful
    back = to_module(model)
    with torch.no_grad():
        np.testing.assert_allclose(back(torch.tensor(x)).numpy(), ref, atol=1e-6)
    if importlib.util.find_spec("ncd_opencl") is not None:
        got = ncd.compile(model, "opencl")(x, params=params)
        np.testing.assert_allclose(got, ref, atol=1e-5)


def test_two_draws_are_two_streams() -> None:
    class Two(nn.Module):
        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return torch.randn_like(x) - torch.randn_like(x)

    model, params = from_torch(Two(), (torch.zeros(7, 13),))
    y = ncd.run(model, np.zeros((7, 13), np.float32), params=params)
    assert np.abs(y).min() > 0.0
