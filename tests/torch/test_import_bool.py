"""from_torch of comparisons, logic and integer casts (issue 15: bool wires, argmax's int64):
torch's bool and int64 results import as ncd bool and int64 wires, so the reference, the
export and OpenCL give torch's dtypes and values, at lengths 1, 7 and 13, with NaN and inf."""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")
from roundtrip import check as _check  # noqa: E402
from torch import nn  # noqa: E402

import ncd  # noqa: E402
from ncd_torch import from_torch  # noqa: E402


class Masks(nn.Module):
    """Comparisons, logic on their bools, a bool read by arithmetic and by where, and the raw
    bool and int64 results as outputs."""

    def __init__(self) -> None:
        super().__init__()
        self.proj = nn.Linear(6, 6)

    def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, ...]:
        h = self.proj(x)
        big, small = h > 0.2, h <= -0.1
        either = big | small
        both = torch.logical_and(big, h < 0.9)
        odd = torch.logical_xor(big, x > 0)
        none = ~either
        gated = torch.where(both, h, x) + none * 2.0
        return big, either, both, odd, none, gated, h.argmax(-1), torch.argmin(h, -1)


@pytest.mark.parametrize("n", [1, 7, 13])
def test_comparisons_and_logic_import_as_bool_wires(n: int) -> None:
    torch.manual_seed(n)
    model = _check(Masks(), torch.randn(3, n, 6))
    graph = model.graph
    dtypes = [graph.values[v].dtype for v in graph.outputs]
    assert dtypes == [ncd.bool] * 5 + [ncd.float32, ncd.int64, ncd.int64]


class Integers(nn.Module):
    """Float to integer (truncation toward zero) and to bool, and back to float."""

    def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, ...]:
        scaled = x * 7.0
        return scaled.long(), scaled.to(torch.int32), x.bool(), scaled.long().float() - scaled


@pytest.mark.parametrize("n", [1, 7, 13])
def test_float_to_integer_and_bool_casts_import(n: int) -> None:
    torch.manual_seed(n)
    x = torch.randn(4, n)
    x[0, 0] = 0.0
    _check(Integers(), x)


class NonFinite(nn.Module):
    def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, ...]:
        return x > 0, x == x, x != x, x.bool(), x.argmax(-1)


def test_non_finite_comparisons_follow_torch() -> None:
    x = torch.randn(4, 7)
    x[0, 2] = float("nan")
    x[1] = float("inf")
    x[2, 4] = -float("inf")
    x[3, 1] = 0.0
    _check(NonFinite(), x)


def test_a_narrowing_integer_cast_is_named() -> None:
    class Narrow(nn.Module):
        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return x.long().to(torch.int32)

    with pytest.raises(ncd.NcdError, match="a cast from int64 to int32"):
        from_torch(Narrow(), (torch.randn(3, 5),))


class Counts(nn.Module):
    """Reductions of masks: any/all over a dim and over everything, a count (int64 in torch),
    the largest of a bool."""

    def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, ...]:
        big = x > 0.5
        return (
            big.any(-1),
            torch.all(x > -1.0, dim=1),
            big.any(),
            big.sum(-1),
            (x != 0).sum(),
            big.amax(-1),
            x.any(-1),
        )


@pytest.mark.parametrize("n", [1, 7, 13])
def test_any_all_and_counts_of_masks_import_in_torchs_dtypes(n: int) -> None:
    torch.manual_seed(n)
    x = torch.randn(3, n)
    x[0] = 0.0
    x[1, 0] = float("nan")
    _check(Counts(), x)


class BoolArithmetic(nn.Module):
    """``+``, ``*``, ``maximum`` and ``minimum`` of two bool tensors are torch's or / and (a
    bool result: ``True + True`` is ``True``, not 2)."""

    def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, ...]:
        a, b = x > 0, torch.sin(3.0 * x) > 0.2
        return a + b, a * b, torch.maximum(a, b), torch.minimum(a, b), (a + b) * 3.0


@pytest.mark.parametrize("n", [1, 7, 13])
def test_arithmetic_of_two_bools_is_logic_as_torch(n: int) -> None:
    torch.manual_seed(n)
    model = _check(BoolArithmetic(), torch.randn(3, n))
    assert [model.graph.values[v].dtype for v in model.graph.outputs[:4]] == ["bool"] * 4
