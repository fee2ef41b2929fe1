"""The round trip of an imported module, shared by the import tests of issue 15's ops: torch's
outputs, then ``from_torch`` on the reference, ``to_module`` back and OpenCL (where PoCL is
installed), each within 1e-4 of torch, NaN where torch gives NaN, and each output in torch's
dtype (an int64 index, a bool mask)."""

from __future__ import annotations

import importlib.util
import warnings

import numpy as np
import torch
from torch import nn

import ncd
from ncd_torch import from_torch, to_module

OPENCL = importlib.util.find_spec("pyopencl") is not None


def outputs(y: object) -> list[np.ndarray]:
    ys = list(y) if isinstance(y, tuple | list) else [y]
    return [np.asarray(v.detach().numpy() if hasattr(v, "detach") else v) for v in ys]


def check(module: nn.Module, x: torch.Tensor, *, opencl: bool = True) -> ncd.Term:
    """``module`` on ``x`` against its import three ways; the imported model."""
    module.eval()
    torch_out = outputs(module(x))
    want = [w.astype(np.float64) for w in torch_out]
    model, params = from_torch(module, (x,))

    def agree(got: list[np.ndarray], where: str) -> None:
        close = dict(rtol=1e-4, atol=1e-4, equal_nan=True)
        for g, w, t in zip(got, want, torch_out, strict=True):
            assert g.dtype == t.dtype, f"{where}: {g.dtype}, where torch gives {t.dtype}"
            np.testing.assert_allclose(g.astype(np.float64), w, **close)

    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        agree(outputs(ncd.run(model, x.numpy(), params=params)), "the reference")
    back = to_module(model, params=params)
    agree(outputs(back(x)), "the export")
    if opencl and OPENCL:
        from ncd_opencl.backend import OpenCLExecutable

        agree(outputs(OpenCLExecutable(model)(x.numpy(), params=params)), "OpenCL")
    return model
