"""``nn.resnet_block`` and ``nn.cnn`` (issue 15) against the torch modules they stand for:
torchvision's BasicBlock written out here (identity and downsampling shortcuts) and LeNet-5,
loading the torch modules' weights, on the reference and OpenCL at awkward sizes, drawn and
priced where those plugins are installed."""

from __future__ import annotations

import importlib.util

import numpy as np
import pytest
import torch
from torch import nn as tnn

import ncd
from ncd import nn

OPENCL = importlib.util.find_spec("ncd_opencl") is not None
N = ncd.Axis("n")


class BasicBlock(tnn.Module):
    def __init__(self, ci: int, co: int, stride: int) -> None:
        super().__init__()
        self.conv1 = tnn.Conv2d(ci, co, 3, stride, 1, bias=False)
        self.bn1 = tnn.BatchNorm2d(co)
        self.conv2 = tnn.Conv2d(co, co, 3, 1, 1, bias=False)
        self.bn2 = tnn.BatchNorm2d(co)
        self.downsample = (
            tnn.Sequential(tnn.Conv2d(ci, co, 1, stride, bias=False), tnn.BatchNorm2d(co))
            if stride != 1 or ci != co
            else None
        )

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = self.bn2(self.conv2(torch.relu(self.bn1(self.conv1(x)))))
        return torch.relu(y + (x if self.downsample is None else self.downsample(x)))


class LeNet(tnn.Module):
    def __init__(self, c_in: int, classes: int) -> None:
        super().__init__()
        self.conv1 = tnn.Conv2d(c_in, 6, 5, padding=2)
        self.conv2 = tnn.Conv2d(6, 16, 5)
        self.fc1 = tnn.LazyLinear(120)
        self.fc2 = tnn.Linear(120, 84)
        self.fc3 = tnn.Linear(84, classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = torch.max_pool2d(torch.relu(self.conv1(x)), 2)
        x = torch.max_pool2d(torch.relu(self.conv2(x)), 2).flatten(1)
        return self.fc3(torch.relu(self.fc2(torch.relu(self.fc1(x)))))


def _randomise_norms(module: tnn.Module) -> None:
    for m in module.modules():
        if isinstance(m, tnn.BatchNorm2d):
            m.running_mean.normal_()
            m.running_var.uniform_(0.5, 2.0)
            m.weight.data.normal_()
            m.bias.data.normal_()


def _check(
    model: ncd.Term, module: tnn.Module, x: torch.Tensor, params: dict[str, np.ndarray]
) -> None:
    with torch.no_grad():
        want = module(x).numpy()
    assert sorted(ncd.init(model)) == sorted(params)
    got = ncd.run(model, x.numpy(), params=params)
    np.testing.assert_allclose(got, want, atol=1e-10)
    if OPENCL:
        f32 = {k: v.astype(np.float32) for k, v in params.items()}
        cl = ncd.compile(model, "opencl")(x.numpy().astype(np.float32), params=f32)
        np.testing.assert_allclose(cl, want, atol=1e-4, rtol=1e-4)
    if importlib.util.find_spec("ncd_diagram"):
        import ncd_diagram

        assert "<svg" in ncd_diagram.diagram(model).to_svg()
    if importlib.util.find_spec("ncd_perf"):
        import ncd_perf

        priced = ncd_perf.cost(model.bind(n=x.shape[0]), "h100")
        assert float(priced.flops["matrix"]) > 0


@pytest.mark.parametrize(
    ("ci", "co", "stride", "h", "w"), [(4, 4, 1, 7, 13), (3, 6, 2, 13, 7), (1, 1, 1, 1, 1)]
)
def test_resnet_block_is_torchvisions_basic_block(
    ci: int, co: int, stride: int, h: int, w: int
) -> None:
    torch.manual_seed(ci + h)
    module = BasicBlock(ci, co, stride).double().eval()
    _randomise_norms(module)
    x = torch.randn(2, ci, h, w, dtype=torch.float64)
    c_out = None if co == ci else ncd.Axis("d", size=co)
    model = nn.resnet_block(
        ncd.Axis("c", size=ci),
        c_out,
        stride=stride,
        height=ncd.Axis("h", size=h),
        width=ncd.Axis("w", size=w),
    ).over(N)
    params = {k: v.numpy() for k, v in module.state_dict().items() if "num_batches" not in k}
    _check(model, module, x, params)


@pytest.mark.parametrize(("c_in", "size", "classes"), [(1, 28, 10), (3, 17, 7)])
def test_cnn_is_lenet(c_in: int, size: int, classes: int) -> None:
    torch.manual_seed(size)
    module = LeNet(c_in, classes).double().eval()
    x = torch.randn(2, c_in, size, size, dtype=torch.float64)
    module(x)  # sizes the lazy fc1
    model = nn.cnn(classes, c_in=c_in, size=size).over(N)
    shapes = {k: v.shape for k, v in ncd.init(model).items()}
    params = {k: v.detach().numpy().reshape(shapes[k]) for k, v in module.state_dict().items()}
    _check(model, module, x, params)


def test_cnn_refuses_images_too_small() -> None:
    with pytest.raises(ncd.DefinitionError, match="size must be an int >= 16"):
        nn.cnn(size=8)
