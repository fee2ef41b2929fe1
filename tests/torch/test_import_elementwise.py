"""The rest of the elementwise family imported from torch code as people write it (issue 15):
``nn`` activation modules and ``torch``/``F`` calls between Linear layers import with
``from_torch``, run on the reference and OpenCL within 1e-4 of torch at awkward sizes, export
back loading the original state dict, and keep torch's NaN and infinity patterns; the clamps'
and ELU's forms ncd does not take are named in the import error."""

from __future__ import annotations

import importlib.util

import numpy as np
import pytest
import torch
import torch.nn.functional as F
from torch import nn

import ncd
from ncd_torch import TorchImportError, from_torch, to_module

OPENCL = importlib.util.find_spec("ncd_opencl") is not None


class Zoo(nn.Module):
    """Every new activation, each behind its own Linear so the values stay in range."""

    def __init__(self, d: int) -> None:
        super().__init__()
        self.acts = nn.ModuleList(
            [
                nn.LeakyReLU(0.1),
                nn.ELU(0.7),
                nn.CELU(1.3),
                nn.SELU(),
                nn.Softplus(2.0, 3.0),
                nn.Mish(),
                nn.Hardswish(),
                nn.Hardsigmoid(),
                nn.Hardtanh(-0.5, 0.8),
                nn.ReLU6(),
                nn.Softsign(),
                nn.LogSigmoid(),
            ]
        )
        self.lins = nn.ModuleList([nn.Linear(d, d) for _ in self.acts])

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        for lin, act in zip(self.lins, self.acts, strict=True):
            x = act(lin(x)) * 2.0
        y = torch.erf(x) + torch.tan(0.3 * x) + torch.sinh(x) - torch.cosh(0.5 * x)
        y = y + torch.asin(torch.tanh(x)) + torch.acos(0.5 * torch.tanh(x))
        y = y + torch.atanh(0.9 * torch.tanh(x)) + torch.acosh(x * x + 1.0)
        y = y + torch.expm1(0.1 * x) + torch.log1p(x * x) + torch.sign(x)
        y = y + torch.floor(3 * x) + torch.ceil(3 * x) + torch.round(3 * x) + torch.trunc(3 * x)
        return torch.clamp(y, -4.0, 4.0) + y.clamp(min=0.5) + torch.clamp_max(y, 1.0)


@pytest.mark.parametrize(("batch", "seq", "d"), [(1, 1, 1), (2, 7, 13), (1, 13, 7)])
def test_the_activation_zoo_imports_and_matches_torch(batch: int, seq: int, d: int) -> None:
    torch.manual_seed(d + seq)
    module = Zoo(d).eval()
    x = torch.randn(batch, seq, d)
    result = from_torch(module, (x,))
    assert len(result.params) == len(list(module.parameters()))
    with torch.no_grad():
        want = module(x).numpy()
    got = ncd.run(result.model, x.numpy(), params=result.params)
    np.testing.assert_allclose(got, want, atol=1e-4, rtol=1e-4)
    if OPENCL:
        cl = ncd.compile(result.model, "opencl")(x.numpy(), params=result.params)
        # floor/ceil/round of values within float rounding of a step may land on either side
        off = np.abs(cl - want) > 1e-4
        assert off.mean() < 0.02, off.sum()
    back = to_module(result.model)
    back.load_state_dict(module.state_dict())
    with torch.no_grad():
        np.testing.assert_allclose(back(x).numpy(), want, atol=1e-5, rtol=1e-5)


class Edges(nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        parts = [
            F.leaky_relu(x, -0.3),
            F.elu(x),
            F.softplus(x, 1.5, 2.0),
            F.hardswish(x),
            F.mish(x),
            F.selu(x),
            torch.clamp(x, -1.0, 1.0),
            F.logsigmoid(x),
            torch.round(x),
        ]
        return torch.stack(parts, dim=-1)


@pytest.mark.filterwarnings("ignore::RuntimeWarning")
def test_nonfinite_inputs_keep_torchs_nan_and_infinity_patterns() -> None:
    x = torch.tensor(
        [[-np.inf, -30.0, -3.0, -0.0, 0.0, 0.5, 2.5, 3.0, 30.0, np.inf, np.nan, 1e-8, -1e-8]],
        dtype=torch.float32,
    )
    module = Edges()
    result = from_torch(module, (x,))
    with torch.no_grad():
        want = module(x).numpy()
    got = ncd.run(result.model, x.numpy(), params=result.params)
    targets = [("reference", got)]
    if OPENCL:
        targets.append(("opencl", ncd.compile(result.model, "opencl")(x.numpy())))
    for where, out in targets:
        np.testing.assert_array_equal(np.isnan(out), np.isnan(want), err_msg=where)
        np.testing.assert_array_equal(np.isinf(out), np.isinf(want), err_msg=where)
        fin = np.isfinite(want)
        np.testing.assert_allclose(out[fin], want[fin], atol=1e-6, rtol=1e-5, err_msg=where)


class TensorClamp(nn.Module):
    def forward(self, x: torch.Tensor, lo: torch.Tensor) -> torch.Tensor:
        return torch.clamp(x, min=lo)


class ScaledElu(nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.ops.aten.elu(x, 1.0, 2.0, 1.0)


@pytest.mark.parametrize(
    ("module", "inputs", "words"),
    [
        (TensorClamp(), (torch.randn(3, 5), torch.randn(3, 5)), "clamp"),
        (ScaledElu(), (torch.randn(3, 5),), "scale or input_scale"),
    ],
    ids=["clamp_by_tensors", "elu_scaled"],
)
def test_forms_ncd_does_not_take_are_named(
    module: nn.Module, inputs: tuple[torch.Tensor, ...], words: str
) -> None:
    with pytest.raises(TorchImportError, match=words):
        from_torch(module, inputs)
