"""torch.nn's own transformer imports unmodified: ``nn.TransformerEncoderLayer`` (batch_first,
both norm orders) and ``nn.MultiheadAttention`` (packed in-projection through unflatten,
unsqueeze, transpose, squeeze and select; a view merging batch and heads), at any batch and
length, on the reference and OpenCL, with the original checkpoint loading into the export."""

from __future__ import annotations

import importlib.util

import numpy as np
import pytest
import torch

import ncd
import ncd_torch

#: the OpenCL half of each check runs where ncd-opencl is installed (the torch session alone
#: has the reference and torch)
OPENCL = importlib.util.find_spec("ncd_opencl") is not None


def _check(module: torch.nn.Module, example: tuple[int, ...], other: tuple[int, ...]) -> None:
    model, params = ncd_torch.from_torch(module, (torch.randn(*example),))
    compiled = ncd.compile(model, "opencl") if OPENCL else None
    back = ncd_torch.to_module(model)
    back.load_state_dict(module.state_dict())  # the original checkpoint, as it is
    gen = torch.Generator().manual_seed(7)

    def arrays(y: object) -> list[np.ndarray]:
        ys = y if isinstance(y, tuple) else (y,)
        return [v.numpy() if isinstance(v, torch.Tensor) else np.asarray(v) for v in ys]

    def agree(got: object, want: list[np.ndarray]) -> None:
        for g, w in zip(arrays(got), want, strict=True):
            np.testing.assert_allclose(g, w, atol=1e-5)

    for shape in (example, other):
        x = torch.randn(*shape, generator=gen)
        with torch.no_grad():
            want = arrays(module(x))
            agree(back(x), want)
        agree(ncd.run(model, x.numpy(), params=params), want)
        if compiled is not None:
            agree(compiled(x.numpy(), params=params), want)


@pytest.mark.parametrize("norm_first", [False, True], ids=["post_norm", "pre_norm"])
def test_transformer_encoder_layer_imports(norm_first: bool) -> None:
    torch.manual_seed(0)
    layer = torch.nn.TransformerEncoderLayer(
        d_model=32, nhead=4, dim_feedforward=64, batch_first=True, norm_first=norm_first
    ).eval()
    _check(layer, (2, 7, 32), (3, 11, 32))


class SelfAttention(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.attn = torch.nn.MultiheadAttention(24, 3, batch_first=True)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.attn(x, x, x, need_weights=False)[0]


def test_multihead_attention_imports() -> None:
    torch.manual_seed(1)
    _check(SelfAttention().eval(), (2, 5, 24), (1, 13, 24))


class WithWeights(torch.nn.Module):
    """``need_weights=True`` (MultiheadAttention's default): the attention weights too,
    averaged over the heads or per head."""

    def __init__(self, average: bool) -> None:
        super().__init__()
        self.attn = torch.nn.MultiheadAttention(24, 3, batch_first=True)
        self.average = average

    def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        return self.attn(x, x, x, average_attn_weights=self.average)  # type: ignore[no-any-return]


@pytest.mark.parametrize("average", [True, False], ids=["averaged", "per_head"])
def test_multihead_attention_returns_its_weights(average: bool) -> None:
    torch.manual_seed(2)
    # the weights path reshapes by the example's sizes, so they stay bound: another size is a
    # typed error before anything runs, never a misread reshape
    _check(WithWeights(average).eval(), (2, 5, 24), (2, 5, 24))
    model, params = ncd_torch.from_torch(WithWeights(average).eval(), (torch.randn(2, 5, 24),))
    with pytest.raises(ncd.SizeError, match="has size 2, got 1"):
        ncd.run(model, np.zeros((1, 5, 24), np.float32), params=params)


def test_transformer_encoder_layer_draws_and_prices() -> None:
    ncd_diagram = pytest.importorskip("ncd_diagram")
    ncd_perf = pytest.importorskip("ncd_perf")
    torch.manual_seed(0)
    layer = torch.nn.TransformerEncoderLayer(32, 4, 64, batch_first=True).eval()
    model, _ = ncd_torch.from_torch(layer, (torch.randn(2, 7, 32),), free_sizes=False)
    assert ncd_diagram.draw(model, "svg").startswith("<svg")
    assert ncd_perf.cost(model).flops
