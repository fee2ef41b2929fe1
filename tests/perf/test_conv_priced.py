"""ncd-perf prices convolution nets: a convolution is windows (no FLOPs: index maps read in
place) and one einsum, so its count is the direct convolution's ``2 N C_out C_in/groups K
L_out``; pooling is a reduction over the window's offsets."""

from __future__ import annotations

import ncd
import ncd_perf
from ncd import conv, ops


def test_conv1d_flops_are_the_direct_convolutions() -> None:
    n, ci, co, k, length, groups = 8, 6, 10, 3, 301, 2
    m = conv.conv1d(ci, co, k, stride=2, padding=1, dilation=2, groups=groups, length=length)
    cost = ncd_perf.cost(m.over(ncd.Axis("n", size=n)), "h100")
    l_out = (length + 2 * 1 - 2 * (k - 1) - 1) // 2 + 1
    assert cost.flops["matrix"] == 2 * n * co * ci // groups * k * l_out
    assert cost.flops["vector"] == n * co * l_out  # the bias
    assert cost.time > 0


def test_a_conv_net_is_priced() -> None:
    net = (
        conv.conv2d(3, 13, 3, padding=1, height=13, width=7)
        >> ops.relu()
        >> conv.max_pool2d(2)
        >> conv.conv2d(13, 8, 3, name="conv2")
    ).over(ncd.Axis("n", size=4))
    cost = ncd_perf.cost(net, "h100")
    first = 2 * 4 * 13 * 3 * 9 * 13 * 7
    second = 2 * 4 * 8 * 13 * 9 * (6 - 2) * (3 - 2)
    assert cost.flops["matrix"] == first + second
    assert len(cost.kernels) >= 2 and cost.time > 0
