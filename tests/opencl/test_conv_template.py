"""ncd-opencl's convolution template (``ncd_opencl.convolve``): which kernels it renders, and
those kernels against the reference at sizes that are not multiples of its blocks (channels,
positions), with strides, dilation, groups, padding 0, a batch, an epilogue (bias, batch norm,
ReLU, a residual add) and non-finite inputs."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

import ncd
from ncd import conv, ops

pytest.importorskip("pyopencl")

from ncd_opencl.generate import generate


def _styles(model: Any) -> list[str]:
    return [k.style for k in generate(model.graph).kernels]


def _check(model: Any, *, nonfinite: bool = False, seed: int = 0) -> None:
    rng = np.random.default_rng(seed)
    g = model.graph
    xs = [rng.standard_normal(g.shape(v)).astype(np.float32) for v in g.inputs]
    if nonfinite:
        flat = xs[0].reshape(-1)
        flat[:: max(1, flat.size // 5)] = np.inf
        flat[1 :: max(2, flat.size // 3)] = -np.inf
        flat[2 :: max(3, flat.size // 4)] = np.nan
    params = ncd.init(model, seed=seed)
    want = ncd.run(model, *xs, params=params)
    got = ncd.compile(model, "opencl")(*xs, params=params)
    np.testing.assert_allclose(got, want, rtol=2e-5, atol=2e-5, equal_nan=True)


CASES = {
    # channels 13 and 37 are not multiples of the channel block, widths 1, 7, 13, 301 not of the
    # position vector
    "k3_p1_13x7x13": lambda: conv.conv2d(3, 13, 3, padding=1, height=7, width=13),
    "k3_p0_37ch_w301": lambda: conv.conv1d(5, 37, 3, length=301),
    "k1_1x1": lambda: conv.conv2d(1, 1, 1, height=1, width=1),
    "k5_p2_w7": lambda: conv.conv1d(4, 9, 5, padding=2, length=7),
    "k7_p3_w13": lambda: conv.conv1d(2, 3, 7, padding=3, length=13),
    "stride2_dil2_g2": lambda: conv.conv2d(
        6, 10, 3, stride=2, padding=1, dilation=2, groups=2, height=13, width=7
    ),
    "depthwise_w13": lambda: conv.conv1d(7, 7, 3, padding=1, groups=7, length=13),
    "k9_taps_past_unroll": lambda: conv.conv1d(2, 3, 9, padding=4, length=13),
}


@pytest.mark.parametrize("name", sorted(CASES))
def test_the_template_renders_convolutions_and_matches_the_reference(name: str) -> None:
    model = CASES[name]().over(ncd.Axis("n", size=2))
    assert "conv" in _styles(model), _styles(model)
    _check(model)


@pytest.mark.parametrize("name", ["k3_p1_13x7x13", "k3_p0_37ch_w301", "stride2_dil2_g2"])
def test_non_finite_inputs_propagate_as_in_the_reference(name: str) -> None:
    _check(CASES[name]().over(ncd.Axis("n", size=3)), nonfinite=True, seed=1)


def test_a_residual_block_fuses_its_epilogue_into_the_template() -> None:
    c, h, w = ncd.Axis("c", size=11), ncd.Axis("h", size=7), ncd.Axis("w", size=13)
    mid = ncd.Axis("c_mid", size=11)
    c1 = conv.conv2d(c, mid, 3, padding=1, bias=False, height=h, width=w, name="conv1")
    c2 = conv.conv2d(mid, c, 3, padding=1, bias=False, height_out=h, width_out=w, name="conv2")
    bn1, bn2 = conv.batch_norm(mid, name="bn1"), conv.batch_norm(c, name="bn2")

    @ncd.trace(inputs=[ncd.ArrayType((c, h, w))])
    def block(x: Any) -> Any:
        return ops.relu()(bn2(c2(ops.relu()(bn1(c1(x))))) + x)

    model = block.over(ncd.Axis("n", size=2))
    assert _styles(model).count("conv") == 2
    _check(model)
    _check(model, nonfinite=True, seed=3)


def test_a_transposed_convolution_takes_the_per_lane_path() -> None:
    # an upsampled window's taps are not neighbours: each lane reads through the window's rule
    t = conv.conv_transpose1d(3, 5, 3, stride=2, length=7).over(ncd.Axis("n", size=2))
    assert "conv" in _styles(t)
    _check(t)


def test_a_plain_contraction_is_not_a_convolution() -> None:
    mm = ops.einsum("a b, b c -> a c", a=13, b=8, c=7)
    assert "conv" not in _styles(mm)
