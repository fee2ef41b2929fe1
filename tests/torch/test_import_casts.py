"""from_torch of casts between float formats: a float64 island inside a float32 model (a sum
of exponentials float32 would overflow) and a bfloat16 round trip become ``ops.cast``; each
matches torch on the reference, OpenCL and the export, at lengths 1, 7 and 13."""

from __future__ import annotations

import importlib.util

import numpy as np
import pytest
import torch
from torch import nn

import ncd
import ncd_torch

#: the OpenCL half of each check runs where ncd-opencl is installed (the torch session alone
#: has the reference and torch)
OPENCL = importlib.util.find_spec("ncd_opencl") is not None


class Island(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.proj = nn.Linear(8, 8)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = self.proj(x).to(torch.float64)
        lse = torch.exp(h * 30.0).sum(-1, keepdim=True).log()
        return lse.to(torch.float32) + x


class Rounded(nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return (x.to(torch.bfloat16) * 3.0).to(torch.float32)


@pytest.mark.parametrize("n", [1, 7, 13])
@pytest.mark.parametrize("module", [Island, Rounded])
def test_float_casts_import_as_ops_cast(n: int, module: type[nn.Module]) -> None:
    torch.manual_seed(n)
    m = module().eval()
    x = torch.randn(2, n, 8) * 4.0
    imported = ncd_torch.from_torch(m, (x,))
    assert imported.model.explain().count("cast") == 2
    with torch.no_grad():
        want = m(x).numpy()
    got = ncd.run(imported.model, x.numpy(), params=imported.params)
    np.testing.assert_allclose(got, want, rtol=1e-6, atol=1e-6)
    if OPENCL:
        exe = ncd.compile(imported.model, "opencl")
        np.testing.assert_allclose(exe(x.numpy(), params=imported.params), want, rtol=1e-6)
    back = ncd_torch.to_module(imported.model)
    back.load_state_dict(m.state_dict())
    with torch.no_grad():
        np.testing.assert_allclose(back(x).numpy(), want, rtol=1e-6, atol=1e-6)
    if module is Island:  # float32 alone overflows where the island does not
        assert np.isfinite(got).all()


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16, torch.float64])
def test_a_module_in_another_format_imports_in_it(dtype: torch.dtype) -> None:
    """Weights and inputs of a bf16, fp16 or fp64 module keep their format: the reference
    rounds where torch does, the fused OpenCL kernels where they store (a few ulps each)."""
    from ncd.testing import MODEL, assert_close_in_format
    from ncd_torch._dtypes import to_numpy

    torch.manual_seed(0)
    m = nn.Sequential(nn.Linear(8, 8), nn.GELU(), nn.LayerNorm(8)).to(dtype).eval()
    imported = ncd_torch.from_torch(m, (torch.randn(2, 7, 8, dtype=dtype),))
    assert [v.label for v in imported.model.config().free] == ["batch", "seq"]
    fmt = ncd.dtype(str(dtype).removeprefix("torch."))
    assert {a.dtype for a in imported.params.values()} == {fmt.numpy}
    x = torch.randn(3, 13, 8, dtype=dtype)
    with torch.no_grad():
        want = to_numpy(m(x))
    got = ncd.run(imported.model, to_numpy(x), params=imported.params)
    assert_close_in_format(got, want, fmt, MODEL)
    if OPENCL:
        exe = ncd.compile(imported.model, "opencl")
        assert_close_in_format(exe(to_numpy(x), params=imported.params), want, fmt, MODEL)
    back = ncd_torch.to_module(imported.model)
    back.load_state_dict(m.state_dict())
    with torch.no_grad():
        assert_close_in_format(to_numpy(back(x)), want, fmt, MODEL)
