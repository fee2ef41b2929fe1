"""from_torch imports issue 15's shape ops (flip, roll, F.pad in reflect/replicate/circular mode,
repeat/tile, repeat_interleave, stack and cat) written as people write them: each module runs on
the reference and OpenCL within 1e-4 of torch, with non-finite elements moved where torch moves
them, and exports back; the acceptance module of cat, stack, cumsum, argmax, prod, clamp, where
and trig functions too."""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")
import torch.nn.functional as F  # noqa: E402
from roundtrip import check  # noqa: E402
from torch import nn  # noqa: E402

import ncd  # noqa: E402
from ncd_torch import from_torch  # noqa: E402

SIZES = (1, 7, 13, 301)


class Moves(nn.Module):
    """Every shape op along the last dim after a linear layer (so they read a computed value)."""

    def __init__(self, d: int) -> None:
        super().__init__()
        self.proj = nn.Linear(d, d)

    def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, ...]:
        h = self.proj(x) * x  # a NaN or inf of x reaches h
        n = h.shape[-1]
        outs = [
            torch.flip(h, dims=[-1, 1]),
            torch.roll(h, (3, -1), dims=(-1, 0)),
            F.pad(h, (2, 1, 1, 0), mode="replicate"),
            F.pad(h, (n, n), mode="circular"),
            h.repeat(1, 2, 3),
            torch.tile(h, (2,)),
            h.repeat_interleave(3, dim=-1),
            torch.stack([h, torch.sin(h)], dim=1),
        ]
        if n > 1:
            outs.append(F.pad(h, (n - 1, 1), mode="reflect"))
        return tuple(outs)


@pytest.mark.parametrize("n", SIZES)
def test_shape_ops_import_at_awkward_sizes(n: int) -> None:
    torch.manual_seed(n)
    x = torch.randn(2, 3, n)
    x[0, 1, n // 2] = float("nan")
    x[1, 2, 0] = float("-inf")
    check(Moves(n), x, opencl=n in (7, 301))


class Acceptance(nn.Module):
    """The issue's acceptance module: cat, stack, cumsum, argmax, prod, clamp, where, trig."""

    def __init__(self) -> None:
        super().__init__()
        self.proj = nn.Linear(13, 13)

    def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, ...]:
        h = self.proj(x)
        joined = torch.cat([torch.sin(h), torch.cos(h)], dim=-1)
        stacked = torch.stack([torch.tanh(h), torch.atan(h)], dim=0)
        running = torch.cumsum(torch.clamp(h, -0.5, 0.5), dim=-1)
        picked = torch.where(h > 0, h, torch.zeros_like(h))
        p = torch.prod(torch.sigmoid(h), dim=-1)
        return joined, stacked, running, torch.argmax(h, dim=-1).float(), picked, p


def test_the_acceptance_module_imports() -> None:
    torch.manual_seed(15)
    check(Acceptance(), torch.randn(5, 13))


class Flat(nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.roll(x, 2)


class Counts(nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x.repeat_interleave(torch.tensor([1, 2, 1]), dim=0)


class Lead(nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x.repeat(2, 1, 1)


@pytest.mark.parametrize(
    ("module", "words"),
    [
        (Flat(), "flattened tensor"),
        (Counts(), "tensor of counts|repeat_interleave"),
        (Lead(), "leading dims"),
    ],
)
def test_unsupported_forms_are_named(module: nn.Module, words: str) -> None:
    with pytest.raises(ncd.NcdError, match=words):
        from_torch(module, (torch.randn(3, 4),))
