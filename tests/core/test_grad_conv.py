"""``ncd.grad`` of convolution nets: the window's rule (a window over the positions, the taps
scattered back) and eval batch norm's against float64 central differences at sizes 1, 7 and 13;
a small conv net trained by gradient descent on the reference; the gradient model on OpenCL."""

from __future__ import annotations

import importlib.util
from typing import Any

import numpy as np
import pytest
from test_grad import check, normal

import ncd
from ncd import conv, nn, ops

SIZES = [1, 7, 13]

#: every field of a window: stride, padding (more than the kernel spans, too), dilation, the
#: transposed convolution's upsample, extra (positive and negative) and reverse
WINDOWS: list[dict[str, Any]] = [
    {},
    {"stride": 2},
    {"padding": 2},
    {"dilation": 2, "padding": 1},
    {"stride": 3, "dilation": 2, "padding": 3},
    {"upsample": 2, "padding": 2, "extra": 1, "reverse": True},
    {"upsample": 3, "padding": 1, "extra": -1},
    {"padding": 3, "extra": -2, "stride": 2},
    {"fill": 2.5, "padding": 1, "reverse": True},
]


@pytest.mark.parametrize("n", SIZES)
@pytest.mark.parametrize("k", [1, 3])
@pytest.mark.parametrize("fields", WINDOWS, ids=str)
def test_window_gradient_scatters_the_taps_back(n: int, k: int, fields: dict[str, Any]) -> None:
    try:
        model = ops.window("l", "o", "k", **fields).over("c").bind(l=n, k=k, c=2)
    except ncd.SizeError:
        pytest.skip("the window does not fit this length")  # e.g. 3 taps over 1 element
    check(model, normal(2, n))


@pytest.mark.parametrize("n", SIZES)
def test_convolutions_and_pooling(n: int) -> None:
    ci, co = ncd.Axis("c_in", size=4), ncd.Axis("c_out", size=2)
    c1 = conv.conv1d(ci, co, 3, stride=2, padding=2, dilation=2, groups=2)
    check(c1.bind(l=n), normal(4, n))
    ct = conv.conv_transpose1d(ci, co, 3, stride=2, padding=1, output_padding=1, groups=2)
    check(ct.bind(l=n), normal(4, n))
    c2 = conv.conv2d(ci, co, (3, 1), stride=(1, 2), padding=(1, 1))
    check(c2.bind(h=n, w=5), normal(4, n, 5))
    check(conv.avg_pool1d(3, 2, 1).over("c").bind(l=n, c=2), normal(2, n))
    check(conv.max_pool1d(3, 2, 1).over("c").bind(l=n, c=3), normal(3, n))


@pytest.mark.parametrize("n", SIZES)
def test_batch_norm_gradient_reaches_every_parameter(n: int) -> None:
    c, length = ncd.Axis("c", size=3), ncd.Axis("l", size=n)
    for affine in (True, False):
        norm = conv.batch_norm(c, affine=affine)

        @ncd.trace(inputs=[ncd.ArrayType((c, length))])
        def body(x: ncd.Tensor) -> ncd.Tensor:
            y: ncd.Tensor = norm(x)
            return y

        check(body.over("b").bind(b=2), normal(2, 3, n))


def _conv_net(classes: int) -> tuple[ncd.Term, ncd.Axis]:
    ci, c = ncd.Axis("c_in", size=2), ncd.Axis("c", size=5)
    cls = ncd.Axis("cls", size=classes)
    body = (
        conv.conv2d(ci, c, 3, padding=1, name="conv")
        >> conv.batch_norm(c)
        >> ops.relu()
        >> conv.max_pool2d(2, padding=1)
        >> ops.mean(["h_out", "w_out"])
        >> ops.linear(f"{c.name} -> {cls.name}", c=c, cls=cls)
    )
    return body, cls


@pytest.mark.parametrize("n", [1, 7])
def test_a_conv_bn_relu_net_matches_finite_differences(n: int) -> None:
    body, _ = _conv_net(3)
    check(body.bind(h=n, w=5), normal(2, n, 5))


def test_a_conv_net_trains_on_the_reference() -> None:
    """Gradient descent on a batch of 13 images of two classes (which channel is bright):
    the loss falls to a fraction of its start, so the gradients point the right way."""
    body, cls = _conv_net(2)
    batch = ncd.Axis("batch", size=13)
    model = body.over(batch).bind(h=7, w=7) >> nn.cross_entropy(cls)
    rng = np.random.default_rng(0)
    labels = np.arange(13) % 2
    x = rng.normal(size=(13, 2, 7, 7)) * 0.3
    x[labels == 0, 0] += 1.0
    x[labels == 1, 1] += 1.0
    params = {k: v.astype(np.float64) for k, v in ncd.init(model, seed=0).items()}
    train = ncd.grad(model)
    first, _ = ncd.run(train, x, labels, params=params)
    for _ in range(60):
        loss, grads = ncd.run(train, x, labels, params=params)
        params = {k: v - 0.5 * grads[k] if k in grads else v for k, v in params.items()}
    # every learned parameter moves; the running statistics are buffers, with no gradient
    assert set(grads) == {k for k in params if "running" not in k}
    assert float(loss) < 0.3 * float(first)


OPENCL = (
    importlib.util.find_spec("ncd_opencl") is not None
    and importlib.util.find_spec("pyopencl") is not None
)


@pytest.mark.skipif(not OPENCL, reason="ncd-opencl (pyopencl) is not installed")
def test_the_conv_gradient_model_runs_on_opencl() -> None:
    body, cls = _conv_net(3)
    batch = ncd.Axis("batch", size=7)
    model = body.over(batch).bind(h=13, w=7) >> nn.cross_entropy(cls)
    ct = conv.conv_transpose1d(4, 2, 3, stride=2, padding=1, output_padding=1).over("b")
    rng = np.random.default_rng(1)
    cases = [
        (model, [rng.normal(size=(7, 2, 13, 7)).astype(np.float32), np.arange(7) % 3]),
        (ct.bind(b=2, l=13) >> ops.sum(["b", "c_out", "l_out"]), [normal(2, 4, 13)]),
    ]
    for m, xs in cases:
        xs = [x.astype(np.float32) if x.dtype.kind == "f" else x for x in xs]
        params = ncd.init(m, seed=0)
        train = ncd.grad(m)
        loss, grads = ncd.run(train, *xs, params=params)
        loss_cl, grads_cl = ncd.compile(train, "opencl")(*xs, params=params)
        assert np.isclose(loss_cl, loss, rtol=1e-5, atol=1e-6)
        for k, ref in grads.items():
            scale = max(float(np.max(np.abs(ref))), 1e-3)
            assert np.max(np.abs(grads_cl[k] - ref)) <= 1e-4 * scale, k
