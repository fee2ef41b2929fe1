"""from_torch of integer arithmetic (issues 12, 15): positions computed from an int64 padding
mask (``cumsum``, ``* mask - 1``, ``clamp``, ``+ 2``) feeding an embedding, and integer results
as outputs (products past 2^24, ``//``, ``%`` and ``div(rounding_mode="floor")`` of negative
numbers), exact and in torch's dtypes on the reference, OpenCL and the torch export; floats'
``//`` and ``%`` with NaN, inf and signs either way."""

from __future__ import annotations

import importlib.util

import numpy as np
import pytest

torch = pytest.importorskip("torch")
from torch import nn  # noqa: E402

import ncd  # noqa: E402
from ncd_torch import from_torch, to_module  # noqa: E402


class Positions(nn.Module):
    """How OPT-style models number the tokens of a left-padded batch."""

    def __init__(self) -> None:
        super().__init__()
        self.emb = nn.Embedding(40, 4)

    def forward(self, ids: torch.Tensor, mask: torch.Tensor) -> tuple[torch.Tensor, ...]:
        pos = torch.cumsum(mask, dim=1) * mask - 1
        pos = pos.clamp(min=0) + 2
        big = ids * 1000003 * 1000003 - pos  # past 2^24: float32 would round it
        signed = ids - 20
        parts = (signed // 3, signed % -4, torch.div(signed, 7, rounding_mode="floor"))
        return self.emb(ids) + self.emb(pos), big, -ids.abs() + (mask > 0), mask.sum(-1), *parts


@pytest.mark.parametrize("seq", [1, 7, 13])
def test_integer_positions_import_exactly(seq: int) -> None:
    torch.manual_seed(seq)
    module = Positions().eval()
    ids = torch.randint(0, 40, (2, seq))
    mask = torch.ones(2, seq, dtype=torch.long)
    mask[0, : seq // 2] = 0
    model, params = from_torch(module, (ids, mask))
    want = [w.detach().numpy() for w in module(ids, mask)]
    runs = {"reference": lambda *xs: ncd.run(model, *xs, params=params)}
    if importlib.util.find_spec("ncd_opencl") is not None:
        runs["opencl"] = lambda *xs: ncd.compile(model, "opencl")(*xs, params=params)
    back = to_module(model, params=params)
    runs["torch"] = lambda *xs: [o.detach().numpy() for o in back(*map(torch.from_numpy, xs))]
    for where, run in runs.items():
        got = run(ids.numpy(), mask.numpy())
        for g, w in zip(got, want, strict=True):
            g = np.asarray(g)
            assert g.dtype == w.dtype, (where, g.dtype, w.dtype)
            if w.dtype.kind == "i":
                np.testing.assert_array_equal(g, w, err_msg=where)
            else:
                np.testing.assert_allclose(g, w, rtol=1e-5, atol=1e-6, err_msg=where)


class FloatDivmod(nn.Module):
    def forward(self, x: torch.Tensor, y: torch.Tensor) -> tuple[torch.Tensor, ...]:
        return x // y, x % y, torch.remainder(x, 1.5), torch.floor_divide(2.5, y)


def test_float_floor_division_and_remainder_match_torch() -> None:
    special = [0.0, -0.0, 1.0, -1.0, 7.5, -7.5, float("inf"), float("-inf"), float("nan")]
    x = torch.tensor(special * len(special))
    y = torch.tensor([v for v in special for _ in special])
    y = torch.where(y == 0, torch.tensor(0.25), y)  # x // 0 is inf either way; keep it finite
    module = FloatDivmod()
    model, params = from_torch(module, (x, y))
    want = [w.numpy() for w in module(x, y)]
    runs = [ncd.run(model, x.numpy(), y.numpy(), params=params)]
    if importlib.util.find_spec("ncd_opencl") is not None:
        runs.append(ncd.compile(model, "opencl")(x.numpy(), y.numpy(), params=params))
    for got in runs:
        for g, w in zip(got, want, strict=True):
            np.testing.assert_allclose(np.asarray(g), w, rtol=1e-6, atol=0, equal_nan=True)
