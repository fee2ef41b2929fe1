"""Convolution and pooling against PyTorch: ``ncd.conv``'s models (windows then an einsum, a
windowed reduction) on the reference and through the torch export, loading torch's weights as
they are; ``from_torch`` of small conv nets on the reference, OpenCL and back to torch."""

from __future__ import annotations

import importlib.util
from typing import Any

import numpy as np
import pytest
import torch
import torch.nn.functional as F
from torch import nn

import ncd
from ncd import conv, ops
from ncd_torch import from_torch, to_module
from ncd_torch._import_errors import advice

N = ncd.Axis("n")

# (c_in, c_out, kernel, length, stride, padding, dilation, groups): sizes 1, 7 and 13, channels
# that are not multiples of 8, each of stride 2, padding 1, dilation 2 and groups 2 or more
CONV1D = [
    (3, 5, 3, 13, 1, 0, 1, 1),
    (6, 10, 3, 13, 2, 1, 2, 2),
    (1, 1, 1, 1, 1, 0, 1, 1),
    (7, 7, 3, 7, 1, 1, 1, 7),
    (4, 6, 2, 7, 2, 1, 1, 2),
]
CONV2D = [
    (3, 13, 3, (7, 13), 1, 1, 1, 1),
    (6, 10, 3, (13, 7), 2, 1, 2, 2),
    (1, 1, 1, (1, 1), 1, 0, 1, 1),
    (5, 3, (3, 2), (7, 7), (2, 1), (1, 0), 1, 1),
]


def _run_both(model: Any, x: torch.Tensor, params: dict[str, torch.Tensor]) -> tuple[Any, Any]:
    """The reference's output and the exported module's (loaded with torch's tensors)."""
    ref = ncd.run(model, x.numpy(), params={k: v.numpy() for k, v in params.items()})
    module = to_module(model).double()
    module.load_state_dict(params)
    with torch.no_grad():
        return ref, module(x).numpy()


@pytest.mark.parametrize("case", CONV1D, ids=str)
def test_conv1d_matches_torch(case: tuple[int, ...]) -> None:
    ci, co, k, length, s, p, d, g = case
    torch.manual_seed(0)
    w = torch.randn(co, ci // g, k, dtype=torch.float64)  # torch's layout, loaded as it is
    b = torch.randn(co, dtype=torch.float64)
    x = torch.randn(2, ci, length, dtype=torch.float64)
    want = F.conv1d(x, w, b, stride=s, padding=p, dilation=d, groups=g).numpy()
    model = conv.conv1d(ci, co, k, stride=s, padding=p, dilation=d, groups=g).over(N)
    ref, exported = _run_both(model, x, {"conv.weight": w, "conv.bias": b})
    assert ref.shape == want.shape
    np.testing.assert_allclose(ref, want, atol=1e-12)
    np.testing.assert_allclose(exported, want, atol=1e-12)


@pytest.mark.parametrize("case", CONV2D, ids=str)
def test_conv2d_matches_torch(case: tuple[Any, ...]) -> None:
    ci, co, k, (h, wd), s, p, d, g = case
    kh, kw = (k, k) if isinstance(k, int) else k
    torch.manual_seed(1)
    w = torch.randn(co, ci // g, kh, kw, dtype=torch.float64)
    b = torch.randn(co, dtype=torch.float64)
    x = torch.randn(2, ci, h, wd, dtype=torch.float64)
    want = F.conv2d(x, w, b, stride=s, padding=p, dilation=d, groups=g).numpy()
    model = conv.conv2d(ci, co, k, stride=s, padding=p, dilation=d, groups=g).over(N)
    ref, exported = _run_both(model, x, {"conv.weight": w, "conv.bias": b})
    np.testing.assert_allclose(ref, want, atol=1e-12)
    np.testing.assert_allclose(exported, want, atol=1e-12)


def test_conv3d_matches_torch() -> None:
    torch.manual_seed(6)
    w = torch.randn(6, 2, 3, 2, 3, dtype=torch.float64)  # groups 2: (out, in/groups, kd, kh, kw)
    b = torch.randn(6, dtype=torch.float64)
    x = torch.randn(2, 4, 5, 7, 1, dtype=torch.float64)
    kw = {"stride": (2, 1, 1), "padding": (1, 0, 1), "dilation": (1, 2, 1), "groups": 2}
    want = F.conv3d(x, w, b, **kw).numpy()
    model = conv.conv3d(4, 6, (3, 2, 3), **kw).over(N)
    ref, exported = _run_both(model, x, {"conv.weight": w, "conv.bias": b})
    np.testing.assert_allclose(ref, want, atol=1e-12)
    np.testing.assert_allclose(exported, want, atol=1e-12)


# (c_in, c_out, kernel, length, stride, padding, output_padding, dilation, groups)
CONV_T1D = [
    (3, 5, 3, 13, 1, 0, 0, 1, 1),
    (6, 10, 3, 13, 2, 1, 1, 2, 2),
    (1, 1, 1, 1, 1, 0, 0, 1, 1),
    (4, 6, 4, 7, 3, 2, 2, 1, 2),
]


@pytest.mark.parametrize("case", CONV_T1D, ids=str)
def test_conv_transpose1d_matches_torch(case: tuple[int, ...]) -> None:
    ci, co, k, length, s, p, op, d, g = case
    torch.manual_seed(4)
    w = torch.randn(ci, co // g, k, dtype=torch.float64)  # torch's (in, out/groups, k)
    b = torch.randn(co, dtype=torch.float64)
    x = torch.randn(2, ci, length, dtype=torch.float64)
    kw = {"stride": s, "padding": p, "output_padding": op, "dilation": d, "groups": g}
    want = F.conv_transpose1d(x, w, b, **kw).numpy()
    model = conv.conv_transpose1d(ci, co, k, **kw).over(N)
    ref, exported = _run_both(model, x, {"conv.weight": w, "conv.bias": b})
    assert ref.shape == want.shape
    np.testing.assert_allclose(ref, want, atol=1e-12)
    np.testing.assert_allclose(exported, want, atol=1e-12)


@pytest.mark.parametrize(
    ("kind", "args", "shape"),
    [
        ("max_pool2d", (3, 2, 1), (2, 3, 13, 7)),
        ("avg_pool2d", (3, 2, 1), (2, 3, 13, 7)),
        ("max_pool2d", (1,), (2, 3, 1, 1)),
        ("max_pool1d", (2,), (2, 5, 13)),
        ("avg_pool1d", (3, 1, 1), (2, 5, 7)),
    ],
)
def test_pooling_matches_torch(kind: str, args: tuple[int, ...], shape: tuple[int, ...]) -> None:
    x = torch.randn(*shape, dtype=torch.float64)
    want = getattr(F, kind)(x, *args).numpy()  # avg: count_include_pad=True, torch's default
    model = getattr(conv, kind)(*args).over(N, ncd.Axis("c"))
    ref, exported = _run_both(model, x, {})
    np.testing.assert_allclose(ref, want, atol=1e-12)
    np.testing.assert_allclose(exported, want, atol=1e-12)


def _net2d() -> nn.Module:
    return nn.Sequential(
        nn.Conv2d(3, 13, 3, padding=1),
        nn.ReLU(),
        nn.MaxPool2d(2),
        nn.Flatten(),
        nn.Linear(13 * 3 * 6, 10),
    ).eval()


def _net1d() -> nn.Module:
    return nn.Sequential(
        nn.Conv1d(6, 10, 3, stride=2, padding=1, dilation=2, groups=2),
        nn.ReLU(),
        nn.AvgPool1d(3, 2, 1),
        nn.Conv1d(10, 5, 1),
        nn.MaxPool1d(2),
    ).eval()


def _net1d_transposed() -> nn.Module:
    return nn.Sequential(
        nn.Conv1d(4, 6, 3, stride=2, dilation=2, groups=2, padding=1),
        nn.ReLU(),
        nn.ConvTranspose1d(6, 4, 3, stride=2, padding=1, output_padding=1, groups=2),
        nn.ConvTranspose1d(4, 3, 2),
    ).eval()


class PaddedNet1d(nn.Module):
    """Issue 15's 1-d acceptance net: stride, dilation, groups, ``F.pad``, a ConvTranspose1d."""

    def __init__(self) -> None:
        super().__init__()
        self.conv = nn.Conv1d(4, 6, 3, stride=2, dilation=2, groups=2)
        self.up = nn.ConvTranspose1d(6, 4, 3, stride=2, padding=1, output_padding=1, groups=2)
        self.head = nn.Conv1d(4, 3, 1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = torch.relu(self.conv(F.pad(x, (2, 1))))
        return self.head(self.up(F.pad(x, (0, 3), value=0.5)))


class Pad2d(nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return F.pad(x, (1, 2, 3, 0), value=-1.0) * 2


def _ceil_pools() -> nn.Module:
    return nn.Sequential(
        nn.MaxPool2d(3, 2, 1, ceil_mode=True), nn.MaxPool2d(2, ceil_mode=True), nn.ReLU()
    )


def _net3d() -> nn.Module:
    return nn.Sequential(
        nn.Conv3d(3, 5, 3, padding=1),
        nn.BatchNorm3d(5),
        nn.ReLU(),
        nn.MaxPool3d(2),
        nn.AdaptiveAvgPool3d(1),
        nn.Flatten(),
        nn.Linear(5, 3),
    ).eval()


@pytest.mark.parametrize(
    ("make", "shape"),
    [
        (_net2d, (2, 3, 7, 13)),
        (_net1d, (2, 6, 29)),
        (_net1d_transposed, (2, 4, 13)),
        (_net3d, (2, 3, 4, 6, 5)),
        (lambda: PaddedNet1d().eval(), (2, 4, 13)),
        (Pad2d, (2, 3, 5, 4)),
        (_ceil_pools, (2, 3, 14, 13)),
    ],
)
def test_a_conv_net_imports_and_matches_torch(make: Any, shape: tuple[int, ...]) -> None:
    torch.manual_seed(2)
    module = make()
    x = torch.randn(*shape)
    imported = from_torch(module, (x,))
    model, params = imported
    kinds = {n.op.kind for n in model.graph.nodes}
    assert "window" in kinds and "conv" not in kinds  # not an opaque box
    with torch.no_grad():
        want = module(x).numpy()
    got = ncd.run(model, x.numpy(), params=params)
    np.testing.assert_allclose(got, want, atol=1e-5)
    back = imported.to_module()
    back.load_state_dict(module.state_dict())  # the original checkpoint, as it is
    with torch.no_grad():
        np.testing.assert_allclose(back(x).numpy(), want, atol=1e-5)


def test_an_imported_conv_net_runs_on_opencl() -> None:
    pytest.importorskip("ncd_opencl")
    torch.manual_seed(3)
    module = _net2d()
    x = torch.randn(2, 3, 7, 13)
    model, params = from_torch(module, (x,))
    with torch.no_grad():
        want = module(x).numpy()
    got = ncd.compile(model, "opencl")(x.numpy(), params=params)
    np.testing.assert_allclose(got, want, atol=1e-5)


class BasicBlock(nn.Module):
    def __init__(self, c_in: int, c_out: int, stride: int) -> None:
        super().__init__()
        self.conv1 = nn.Conv2d(c_in, c_out, 3, stride, 1, bias=False)
        self.bn1 = nn.BatchNorm2d(c_out)
        self.conv2 = nn.Conv2d(c_out, c_out, 3, 1, 1, bias=False)
        self.bn2 = nn.BatchNorm2d(c_out)
        self.down = None
        if stride != 1 or c_in != c_out:
            self.down = nn.Sequential(
                nn.Conv2d(c_in, c_out, 1, stride, bias=False), nn.BatchNorm2d(c_out)
            )

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = self.bn2(self.conv2(torch.relu(self.bn1(self.conv1(x)))))
        return torch.relu(y + (x if self.down is None else self.down(x)))


class ResNet(nn.Module):
    """A ResNet of basic blocks: stem, max pool, a block and a downsampling block, global
    average pooling, a linear head (issue 15's acceptance net, at 3x32x32)."""

    def __init__(self) -> None:
        super().__init__()
        self.stem, self.bn = nn.Conv2d(3, 8, 3, 1, 1, bias=False), nn.BatchNorm2d(8)
        self.pool = nn.MaxPool2d(3, 2, 1)
        self.layer1, self.layer2 = BasicBlock(8, 8, 1), BasicBlock(8, 13, 2)
        self.avg, self.fc = nn.AdaptiveAvgPool2d(1), nn.Linear(13, 10)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.pool(torch.relu(self.bn(self.stem(x))))
        x = self.layer2(self.layer1(x))
        return self.fc(torch.flatten(self.avg(x), 1))


def test_a_resnet_imports_runs_exports_draws_and_is_priced() -> None:
    torch.manual_seed(5)
    module = ResNet().eval()
    with torch.no_grad():
        for m in module.modules():
            if isinstance(m, nn.BatchNorm2d):
                m.running_mean.normal_(0.0, 0.1)
                m.running_var.uniform_(0.5, 2.0)
                m.weight.normal_(1.0, 0.1)
                m.bias.normal_(0.0, 0.1)
    x = torch.randn(2, 3, 32, 32)
    imported = from_torch(module, (x,))
    model, params = imported
    with torch.no_grad():
        want = module(x).numpy()
    np.testing.assert_allclose(ncd.run(model, x.numpy(), params=params), want, atol=1e-5)
    back = imported.to_module()
    back.load_state_dict(module.state_dict())
    with torch.no_grad():
        np.testing.assert_allclose(back(x).numpy(), want, atol=1e-5)
    if importlib.util.find_spec("ncd_opencl") is not None:
        got = ncd.compile(model, "opencl")(x.numpy(), params=params)
        np.testing.assert_allclose(got, want, atol=1e-5)
    if importlib.util.find_spec("ncd_diagram") is not None:
        import ncd_diagram

        svg = str(ncd_diagram.draw(model))
        assert svg.count('class="window"') >= 2 * 6  # two windows per conv and pooling
    if importlib.util.find_spec("ncd_perf") is not None:
        import ncd_perf

        assert ncd_perf.cost(model, "h100").flops["matrix"] > 0


def test_convolution_advice_no_longer_says_unsupported() -> None:
    text = advice("aten.conv_transpose2d")
    assert "not supported" not in text.split(";")[0] and "2-d and 3-d transposed" in text
    assert "imports" in advice("aten.max_pool2d_with_indices")  # the max_pool* advice
    assert "eval mode" in advice("aten.batch_norm")


def test_padding_same_is_refused_by_name() -> None:
    module = nn.Sequential(nn.Conv1d(3, 4, 3, padding="same")).eval()
    with pytest.raises(ncd.NcdError, match="padding='same'"):
        from_torch(module, (torch.randn(2, 3, 7),))


@pytest.mark.parametrize("groups, c, spatial", [(3, 6, (5, 7)), (1, 4, (13,)), (7, 7, (1, 13))])
def test_group_and_instance_norm_match_torch(groups: int, c: int, spatial: tuple[int, ...]) -> None:
    """``nn.group_norm`` against ``torch.nn.GroupNorm`` (weights loaded by torch's names) and
    ``nn.instance_norm`` against ``InstanceNorm{1,2}d``, float64, with a NaN in one group."""
    ch = ncd.Axis("c", size=c)
    over = tuple(ncd.Axis(f"s{i}", size=n) for i, n in enumerate(spatial))
    torch.manual_seed(c)
    x = torch.randn(2, c, *spatial, dtype=torch.float64)
    x[0, 0].view(-1)[0] = float("nan")  # its group is NaN, the others are not
    gn = nn.GroupNorm(groups, c).double()
    with torch.no_grad():
        gn.weight.normal_()
        gn.bias.normal_()
    model = ncd.nn.group_norm(groups, ch, over).over(N)
    params = {f"gn.{k}": v.detach().numpy() for k, v in gn.state_dict().items()}
    with torch.no_grad():
        want = gn(x).numpy()
    np.testing.assert_allclose(
        ncd.run(model, x.numpy(), params=params), want, rtol=1e-12, atol=1e-12
    )
    inorm = (nn.InstanceNorm1d if len(spatial) == 1 else nn.InstanceNorm2d)(c).double()
    with torch.no_grad():
        want = inorm(x).numpy()
    got = ncd.run(ncd.nn.instance_norm(ch, over).over(N), x.numpy())
    np.testing.assert_allclose(got, want, rtol=1e-12, atol=1e-12)


def test_group_norm_refuses_groups_that_do_not_divide() -> None:
    with pytest.raises(ncd.DefinitionError, match=r"does not split into 4 groups.*Fix"):
        ncd.nn.group_norm(4, ncd.Axis("c", size=6))


@pytest.mark.parametrize(
    "make, shape",
    [
        (lambda: nn.Sequential(nn.Conv2d(4, 6, 3), nn.GroupNorm(3, 6), nn.ReLU()), (2, 4, 9, 11)),
        (lambda: nn.Sequential(nn.Conv1d(4, 6, 3), nn.InstanceNorm1d(6, affine=True)), (2, 4, 13)),
        (lambda: nn.Sequential(nn.Conv2d(4, 6, 3), nn.InstanceNorm2d(6)), (2, 4, 7, 7)),
    ],
)
def test_group_and_instance_norm_import(make: Any, shape: tuple[int, ...]) -> None:
    torch.manual_seed(5)
    module = make().eval()
    with torch.no_grad():
        for m in module.modules():
            if isinstance(m, nn.GroupNorm | nn.InstanceNorm1d) and m.affine:
                m.weight.normal_()
                m.bias.normal_()
    x = torch.randn(*shape)
    imported = from_torch(module, (x,))
    with torch.no_grad():
        want = module(x).numpy()
    got = ncd.run(imported.model, x.numpy(), params=imported.params)
    np.testing.assert_allclose(got, want, atol=1e-5)
    back = imported.to_module()
    back.load_state_dict(module.state_dict())
    with torch.no_grad():
        np.testing.assert_allclose(back(x).numpy(), want, atol=1e-5)
    if importlib.util.find_spec("ncd_opencl") is not None:
        exe = ncd.compile(imported.model, "opencl")
        np.testing.assert_allclose(exe(x.numpy(), params=imported.params), want, atol=1e-5)


def test_group_norm_gradients_match_autograd() -> None:
    c, h = ncd.Axis("c", size=6), ncd.Axis("h", size=5)
    body = ncd.nn.group_norm(3, c, (h,)).over(ncd.Axis("n", size=2))
    model = body >> ncd.ops.square() >> ncd.ops.sum(("n", "c", "h"))
    assert set(ncd.init(model, seed=0)) == {"gn.weight", "gn.bias"}  # torch's names, composed
    gn = nn.GroupNorm(3, 6).double()
    with torch.no_grad():
        gn.weight.normal_()
        gn.bias.normal_()
    x = torch.randn(2, 6, 5, dtype=torch.float64, requires_grad=True)
    (gn(x) ** 2).sum().backward()
    params = {f"gn.{k}": v.detach().numpy() for k, v in gn.state_dict().items()}
    _, grads = ncd.run(ncd.grad(model), x.detach().numpy(), params=params)
    np.testing.assert_allclose(grads["gn.weight"], gn.weight.grad.numpy(), atol=1e-12)  # type: ignore[union-attr]
    np.testing.assert_allclose(grads["gn.bias"], gn.bias.grad.numpy(), atol=1e-12)  # type: ignore[union-attr]
    _, (gx,) = ncd.run(ncd.grad(model, wrt="inputs"), x.detach().numpy(), params=params)
    np.testing.assert_allclose(gx, x.grad.numpy(), atol=1e-12)  # type: ignore[union-attr]


class TrainNet1d(nn.Module):
    """A 1-d conv net with batch norm, used in ``train()`` mode: batch statistics."""

    def __init__(self) -> None:
        super().__init__()
        self.conv = nn.Conv1d(3, 7, 3, padding=1)
        self.bn = nn.BatchNorm1d(7)
        self.head = nn.Conv1d(7, 2, 1)
        self.bn2 = nn.BatchNorm1d(2, affine=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.bn2(self.head(torch.relu(self.bn(self.conv(x)))))


@pytest.mark.parametrize(
    ("make", "shape", "other"),
    [
        (lambda: BasicBlock(3, 5, 2), (2, 3, 7, 13), (3, 3, 7, 13)),
        (TrainNet1d, (2, 3, 13), (1, 3, 13)),
    ],
)
def test_a_training_mode_batch_norm_imports_with_batch_statistics(
    make: Any, shape: tuple[int, ...], other: tuple[int, ...]
) -> None:
    """A module in ``train()`` mode imports with its batch statistics (the batch left free),
    matches torch at another batch on the reference, OpenCL and the export, and its
    gradients equal autograd's."""
    torch.manual_seed(5)
    module = make().double().train()
    for m in module.modules():
        if isinstance(m, nn.BatchNorm1d | nn.BatchNorm2d) and m.affine:
            with torch.no_grad():
                m.weight.uniform_(0.5, 2.0)
                m.bias.normal_()
    imported = from_torch(module, (torch.randn(*shape, dtype=torch.float64),))
    model, params = imported
    assert not any(n.op.kind == "batch_norm" for n in model.graph.nodes)
    x = torch.randn(*other, dtype=torch.float64, requires_grad=True)
    want_t = module(x)
    want = want_t.detach().numpy()
    np.testing.assert_allclose(ncd.run(model, x.detach().numpy(), params=params), want, atol=1e-10)
    back = imported.to_module().double().train()
    back.load_state_dict(module.state_dict())
    with torch.no_grad():
        np.testing.assert_allclose(back(x).numpy(), want, atol=1e-10)
    r = np.random.default_rng(0).standard_normal(want.shape)
    (want_t * torch.tensor(r)).sum().backward()
    _, grads = ncd.run(ncd.grad(model, cotangents=True), x.detach().numpy(), r, params=params)
    torch_names = imported.torch_names
    for name, g in grads.items():
        tensor = dict(module.named_parameters())[torch_names[name]]
        np.testing.assert_allclose(g, tensor.grad.numpy().reshape(g.shape), atol=1e-9, err_msg=name)
    if importlib.util.find_spec("ncd_opencl") is not None:
        p32 = {k: v.astype(np.float32) for k, v in params.items()}
        got = ncd.compile(model, "opencl")(x.detach().numpy().astype(np.float32), params=p32)
        np.testing.assert_allclose(got, want, atol=1e-4)


def test_training_with_batch_statistics_follows_torch_step_by_step() -> None:
    """Three SGD steps of a conv / batch norm / ReLU net in ``train()`` mode, written with
    ``conv.batch_norm(over=..., running=True)``: the loss, the learned parameters and the
    running statistics equal torch's at every step (the statistics stored from the model's
    second and third outputs), and the eval form then equals torch's ``eval()``."""
    torch.manual_seed(6)
    module = nn.Sequential(nn.Conv2d(3, 7, 3, padding=1), nn.BatchNorm2d(7), nn.ReLU()).double()
    ci, c, batch = ncd.Axis("c_in", size=3), ncd.Axis("c", size=7), ncd.Axis("batch")
    spatial = (batch, ncd.Axis("h_out"), ncd.Axis("w_out"))
    conv2d = conv.conv2d(ci, c, 3, padding=1, name="0").over(batch)
    train = conv2d >> conv.batch_norm(c, over=spatial, running=True, name="1")
    train = train >> (ops.relu() @ ncd.identity(2))
    evaluate = conv2d >> conv.batch_norm(c, name="1") >> ops.relu()
    sd = {k: v.detach().clone() for k, v in module.state_dict().items()}
    params = {k: v.numpy() for k, v in sd.items() if "num_batches" not in k}
    opt = torch.optim.SGD(module.parameters(), lr=0.1)
    rng = np.random.default_rng(1)
    for _ in range(3):
        x = rng.standard_normal((5, 3, 7, 13))
        r = rng.standard_normal((5, 7, 7, 13))
        module.train()
        opt.zero_grad()
        loss_t = (module(torch.tensor(x)) * torch.tensor(r)).sum()
        loss_t.backward()
        opt.step()
        y, mean, var = ncd.run(train, x, params=params)
        np.testing.assert_allclose((y * r).sum(), loss_t.item(), rtol=1e-10)
        learned = {k: v for k, v in params.items() if "running" not in k}
        # the statistics' seeds are zero: torch does not differentiate their update
        step = ncd.grad(train, cotangents=True)
        _, grads = ncd.run(step, x, r, np.zeros(7), np.zeros(7), params=params)
        params = {k: v - 0.1 * grads[k] if k in grads else v for k, v in params.items()}
        params["1.running_mean"], params["1.running_var"] = mean, var
        assert set(grads) == set(learned)
        for k, v in module.state_dict().items():
            if "num_batches" not in k:
                np.testing.assert_allclose(params[k], v.numpy(), atol=1e-10, err_msg=k)
    module.eval()
    x = rng.standard_normal((2, 3, 7, 13))
    with torch.no_grad():
        want = module(torch.tensor(x)).numpy()
    np.testing.assert_allclose(ncd.run(evaluate, x, params=params), want, atol=1e-10)
