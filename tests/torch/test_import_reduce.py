"""from_torch imports issue 15's reductions (prod, logsumexp, var/std, argmax/argmin, max/min
along a dim, cumsum/cumprod of activations): each module runs on the reference and OpenCL
within 1e-4 of torch, with non-finite rows where torch defines them, and exports back."""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")
from roundtrip import check as _check  # noqa: E402
from torch import nn  # noqa: E402

import ncd  # noqa: E402
from ncd_torch import from_torch  # noqa: E402


class Mixed(nn.Module):
    """A linear layer, then every reduction of the issue on its output."""

    def __init__(self) -> None:
        super().__init__()
        self.proj = nn.Linear(13, 7)

    def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, ...]:
        h = self.proj(x)
        running = torch.cumsum(h, dim=-1)
        top = torch.argmax(h, dim=-1)
        p = torch.prod(torch.sigmoid(h), dim=-1)
        lse = torch.logsumexp(h, dim=-1)
        v = torch.var(h, dim=-1)
        s = torch.std(h, dim=1, correction=0, keepdim=True)
        return running, top.float(), p, lse, v + s.squeeze(-1)


def test_a_module_using_cumsum_argmax_prod_logsumexp_var_imports() -> None:
    torch.manual_seed(15)
    _check(Mixed(), torch.randn(5, 13))


class Stats(nn.Module):
    def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, ...]:
        values, index = torch.max(x, dim=1)
        low, where = x.min(dim=-1)
        return (
            values,
            index.float(),
            low,
            where.float(),
            torch.argmin(x, 1).float(),
            torch.cumprod(x, 1),
            x.prod(),
            x.var(1, unbiased=False),
        )


@pytest.mark.parametrize("n", [1, 7, 301])
def test_max_min_with_indices_cumprod_and_full_prod(n: int) -> None:
    torch.manual_seed(n)
    x = 0.9 + 0.2 * torch.rand(4, n)
    _check(Stats(), x)


class NonFinite(nn.Module):
    def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, ...]:
        return torch.logsumexp(x, -1), torch.argmax(x, -1).float(), torch.cumsum(x, -1)


def test_non_finite_rows_follow_torch() -> None:
    x = torch.randn(4, 7)
    x[1] = -float("inf")
    x[2, 3] = float("inf")
    x[3, 5] = float("nan")
    _check(NonFinite(), x)


def test_unsupported_forms_are_named() -> None:
    class Flat(nn.Module):
        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return torch.argmax(x).float()

    with pytest.raises(ncd.NcdError, match="flattened tensor"):
        from_torch(Flat(), (torch.randn(3, 4),))
