"""from_torch of max pooling with ``return_indices=True`` (issue 15): the values as a windowed
max and the indices as ``ncd.conv.pool_indices``, int64 as torch's, on the reference, the
export and OpenCL, in 1-d (``ceil_mode`` too), 2-d and 3-d, with NaN and -inf."""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")
from roundtrip import check as _check  # noqa: E402
from torch import nn  # noqa: E402
from torch.nn import functional as F  # noqa: E402


class Pools(nn.Module):
    def __init__(self, nd: int, k: int, s: int, p: int, d: int, ceil: bool) -> None:
        super().__init__()
        self.nd, self.args = nd, dict(stride=s, padding=p, dilation=d, ceil_mode=ceil)
        self.k = k

    def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        pool = {1: F.max_pool1d, 2: F.max_pool2d, 3: F.max_pool3d}[self.nd]
        return pool(x, self.k, return_indices=True, **self.args)  # type: ignore[no-any-return]


CASES = [
    (1, 3, 2, 1, 1, False, (2, 3, 13)),
    (1, 2, 2, 0, 1, True, (2, 3, 7)),
    (1, 1, 1, 0, 1, False, (1, 1, 1)),
    (2, 3, 2, 1, 1, False, (2, 3, 7, 13)),
    (2, 2, 1, 0, 2, False, (1, 2, 9, 7)),
    (3, 2, 2, 0, 1, False, (1, 2, 5, 6, 7)),
]


@pytest.mark.parametrize("case", CASES, ids=lambda c: f"{c[0]}d-k{c[1]}s{c[2]}p{c[3]}d{c[4]}")
def test_max_pool_indices_import(case: tuple) -> None:
    nd, k, s, p, d, ceil, shape = case
    torch.manual_seed(sum(shape))
    x = torch.randn(*shape)
    x.view(-1)[0] = float("nan")
    if shape[0] > 1:
        x[1] = -float("inf")
    _check(Pools(nd, k, s, p, d, ceil), x)
