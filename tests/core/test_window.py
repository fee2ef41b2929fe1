"""The sliding-window relation (``ops.window``) on the reference: its values against a direct
loop, the derived output length against torch's formula, sizes bound at run time, the typed
errors, JSON, and convolution and pooling built from it (``ncd.conv``) against direct sums."""

from __future__ import annotations

import itertools
import math

import numpy as np
import pytest

import ncd
from ncd import conv, ops
from ncd.errors import DefinitionError, SizeError


def _windows(x: np.ndarray, k: int, s: int, p: int, d: int, fill: float) -> np.ndarray:
    n = x.shape[-1]
    m = (n + 2 * p - d * (k - 1) - 1) // s + 1
    out = np.full((*x.shape[:-1], m, k), fill, dtype=x.dtype)
    for o in range(m):
        for j in range(k):
            i = o * s + j * d - p
            if 0 <= i < n:
                out[..., o, j] = x[..., i]
    return out


@pytest.mark.parametrize(
    ("n", "k", "s", "p", "d"),
    [
        (13, 3, 1, 0, 1),
        (13, 3, 2, 1, 2),
        (7, 7, 1, 0, 1),
        (1, 1, 1, 0, 1),
        (1, 3, 1, 1, 1),
        (13, 2, 3, 1, 1),
        (7, 3, 2, 2, 3),
    ],
)
def test_window_matches_a_direct_loop(n: int, k: int, s: int, p: int, d: int) -> None:
    rng = np.random.default_rng(0)
    x = rng.standard_normal((3, n))
    for fill in (0.0, -math.inf):
        m = ops.window("l", "o", "j", j=k, stride=s, padding=p, dilation=d, fill=fill)
        y = ncd.run(m.over(ncd.Axis("c", size=3)), x)
        np.testing.assert_array_equal(y, _windows(x, k, s, p, d, fill))


def test_output_length_is_torchs_formula() -> None:
    for n, k, s, p, d in itertools.product((1, 2, 7, 13), (1, 2, 3), (1, 2, 3), (0, 1, 2), (1, 2)):
        want = math.floor((n + 2 * p - d * (k - 1) - 1) / s) + 1
        if want < 1:
            with pytest.raises(SizeError):
                ops.window(ncd.Axis("l", size=n), "o", "j", j=k, stride=s, padding=p, dilation=d)
            continue
        w = ops.window(ncd.Axis("l", size=n), "o", "j", j=k, stride=s, padding=p, dilation=d)
        (out,) = w.graph.outputs
        assert w.graph.shape(out) == (want, k), (n, k, s, p, d)


def test_length_bound_at_run_time_derives_the_positions() -> None:
    m = ops.window("l", "o", "j", j=3, stride=2, padding=1).over(ncd.Axis("c", size=2))
    assert [v.label for v in m.graph.config().free] == ["l"]  # o is derived, not configured
    for n in (1, 7, 13):
        x = np.arange(2.0 * n).reshape(2, n)
        np.testing.assert_array_equal(ncd.run(m, x), _windows(x, 3, 2, 1, 1, 0.0))
    assert m.graph.bind(l=13).shape(m.graph.bind(l=13).outputs[0]) == (2, 7, 3)


def test_a_window_larger_than_its_padded_input_is_a_size_error_naming_the_axes() -> None:
    with pytest.raises(SizeError, match=r"j#\w+ of 5 offsets .* l#\w+ of 3 elements"):
        ops.window(ncd.Axis("l", size=3), "o", "j", j=5)
    m = ops.window("l", "o", "j", j=5, dilation=2)
    with pytest.raises(SizeError, match=r"span 9.*l#\w+ of 4 elements"):
        ncd.run(m, np.zeros(4))
    with pytest.raises(SizeError, match="window"):
        m.graph.bind(l=8)


def test_bad_window_parameters_are_definition_errors() -> None:
    with pytest.raises(DefinitionError, match=r"stride must be a positive int \(at most 2\^62\)"):
        ops.window("l", "o", "j", j=3, stride=0)
    with pytest.raises(DefinitionError, match="stride must be"):  # found by the JSON fuzzer
        ops.window("l", "o", "j", j=3, stride=2**63)
    with pytest.raises(DefinitionError, match="padding must be an int >= 0"):
        ops.window("l", "o", "j", j=3, padding=-1)
    with pytest.raises(DefinitionError, match="dilation"):
        ops.window("l", "o", "j", j=3, dilation=0)
    with pytest.raises(DefinitionError, match="fill must be a number"):
        ops.window("l", "o", "j", j=3, fill=math.nan)
    with pytest.raises(DefinitionError, match="three different axes"):
        ops.window("l", "l", "j", j=3)
    with pytest.raises(SizeError, match="declared with 9 positions"):
        ops.window(ncd.Axis("l", size=13), ncd.Axis("o", size=9), "j", j=3)


def test_window_round_trips_through_json() -> None:
    m = ops.window("l", "o", "j", j=3, stride=2, padding=1, fill=-math.inf)
    m = m.over(ncd.Axis("c", size=2))
    back = ncd.from_json(ncd.to_json(m))
    x = np.random.default_rng(1).standard_normal((2, 13))
    np.testing.assert_array_equal(ncd.run(back, x), ncd.run(m, x))


def _conv_direct(
    x: np.ndarray, w: np.ndarray, b: np.ndarray, s: int, p: int, d: int, g: int
) -> np.ndarray:
    n, _, length = x.shape
    co, cg, k = w.shape
    m = (length + 2 * p - d * (k - 1) - 1) // s + 1
    xp = np.pad(x, ((0, 0), (0, 0), (p, p)))
    y = np.zeros((n, co, m))
    og = co // g
    for o in range(co):
        grp = o // og
        for t in range(m):
            taps = xp[:, grp * cg : (grp + 1) * cg, t * s : t * s + d * (k - 1) + 1 : d]
            y[:, o, t] = np.einsum("nck,ck->n", taps, w[o]) + b[o]
    return y


@pytest.mark.parametrize(
    ("ci", "co", "k", "length", "s", "p", "d", "g"),
    [
        (3, 5, 3, 13, 1, 0, 1, 1),
        (6, 4, 3, 13, 2, 1, 2, 2),
        (1, 1, 1, 1, 1, 0, 1, 1),
        (7, 7, 3, 7, 1, 1, 1, 7),
    ],
)
def test_conv1d_is_windows_then_an_einsum(
    ci: int, co: int, k: int, length: int, s: int, p: int, d: int, g: int
) -> None:
    m = conv.conv1d(ci, co, k, stride=s, padding=p, dilation=d, groups=g).over(ncd.Axis("n"))
    kinds = {n.op.kind for n in m.graph.nodes}
    assert {"window", "einsum"} <= kinds and "conv" not in kinds  # not an opaque box
    rng = np.random.default_rng(2)
    params = {k_: rng.standard_normal(v.shape) for k_, v in ncd.init(m, seed=0).items()}
    assert params["conv.weight"].shape == (co, ci // g, k)
    x = rng.standard_normal((2, ci, length))
    want = _conv_direct(x, params["conv.weight"], params["conv.bias"], s, p, d, g)
    np.testing.assert_allclose(ncd.run(m, x, params=params), want, atol=1e-12)


def test_pooling_is_a_windowed_reduction() -> None:
    x = np.random.default_rng(3).standard_normal((2, 13))
    c = ncd.Axis("c", size=2)
    mx = _windows(x, 3, 2, 1, 1, -math.inf).max(-1)
    np.testing.assert_array_equal(ncd.run(conv.max_pool1d(3, 2, 1).over(c), x), mx)
    avg = _windows(x, 3, 2, 1, 1, 0.0).mean(-1)  # count_include_pad=True
    np.testing.assert_allclose(ncd.run(conv.avg_pool1d(3, 2, 1).over(c), x), avg, atol=1e-15)
    with pytest.raises(DefinitionError, match="more than half the kernel"):
        conv.max_pool1d(2, 1, 2)
    with pytest.raises(SizeError, match="does not fit"):
        ncd.run(conv.max_pool2d(5).over(c), np.zeros((2, 3, 9)))


def test_nn_reexports_convolution_and_pooling() -> None:
    for name in ("conv1d", "conv2d", "max_pool1d", "max_pool2d", "avg_pool1d", "avg_pool2d"):
        assert getattr(ncd.nn, name) is getattr(conv, name)


def test_batch_norm_is_the_eval_formula_over_the_channel_axis() -> None:
    c = ncd.Axis("c_out", size=5)
    m = (conv.conv1d(3, c, 3) >> conv.batch_norm(c)).over(ncd.Axis("n"))
    rng = np.random.default_rng(4)
    params = {k: rng.uniform(0.5, 2.0, v.shape) for k, v in ncd.init(m, seed=0).items()}
    x = rng.standard_normal((2, 3, 13))
    y = ncd.run(m, x, params=params)
    z = _conv_direct(x, params["conv.weight"], params["conv.bias"], 1, 0, 1, 1)
    mean, var = params["bn.running_mean"][:, None], params["bn.running_var"][:, None]
    want = (z - mean) / np.sqrt(var + 1e-5) * params["bn.weight"][:, None] + params["bn.bias"][
        :, None
    ]
    np.testing.assert_allclose(y, want, atol=1e-12)  # and [n c l] keeps its order
    with pytest.raises(DefinitionError, match="the Axis of the layer before"):
        conv.batch_norm("c_out")  # type: ignore[arg-type]
    stray = ops.batch_norm(ncd.Axis("c", size=4)).over(ncd.Axis("n", size=2), ncd.Axis("l", size=3))
    with pytest.raises(
        DefinitionError, match=r"channel axis c#\w+ \(4\) is not an axis of its input"
    ):
        ncd.run(stray, np.zeros((2, 3)), params=ncd.init(stray, seed=0))


def _spread_windows(
    x: np.ndarray, k: int, s: int, p: int, d: int, u: int, extra: int, reverse: bool
) -> np.ndarray:
    n = x.shape[-1]
    wide = np.zeros((*x.shape[:-1], (n - 1) * u + 1 + 2 * p + extra))
    wide[..., p : p + (n - 1) * u + 1 : u] = x
    m = (wide.shape[-1] - d * (k - 1) - 1) // s + 1
    out = np.zeros((*x.shape[:-1], m, k))
    for o in range(m):
        for j in range(k):
            out[..., o, j] = wide[..., o * s + (k - 1 - j if reverse else j) * d]
    return out


@pytest.mark.parametrize(("n", "k", "u", "p", "extra", "reverse"), [(13, 3, 2, 1, 1, True)])
def test_an_upsampled_reversed_window_matches_a_direct_loop(
    n: int, k: int, u: int, p: int, extra: int, reverse: bool
) -> None:
    x = np.random.default_rng(5).standard_normal((2, n))
    for d in (1, 2):
        w = ops.window(
            "l", "o", "j", j=k, padding=p, dilation=d, upsample=u, extra=extra, reverse=reverse
        )
        got = ncd.run(w.over(ncd.Axis("c", size=2)), x)
        np.testing.assert_array_equal(got, _spread_windows(x, k, 1, p, d, u, extra, reverse))


def _transposed_direct(x: np.ndarray, w: np.ndarray, s: int, p: int, op: int, d: int, g: int):
    n, ci, length = x.shape
    _, og, k = w.shape
    full = (length - 1) * s + d * (k - 1) + 1 + op
    y = np.zeros((n, og * g, full))
    cg = ci // g
    for c in range(ci):
        grp = c // cg
        for i in range(length):
            for j in range(k):
                t = i * s + j * d
                y[:, grp * og : (grp + 1) * og, t] += x[:, c, i, None] * w[c, :, j]
    return y[:, :, p : full - p]


@pytest.mark.parametrize(
    ("ci", "co", "k", "length", "s", "p", "op", "d", "g"),
    [(3, 5, 3, 13, 1, 0, 0, 1, 1), (6, 10, 3, 13, 2, 1, 1, 2, 2), (1, 1, 1, 1, 1, 0, 0, 1, 1)],
)
def test_conv_transpose1d_is_a_spread_reversed_window_then_an_einsum(
    ci: int, co: int, k: int, length: int, s: int, p: int, op: int, d: int, g: int
) -> None:
    m = conv.conv_transpose1d(
        ci, co, k, stride=s, padding=p, output_padding=op, dilation=d, groups=g
    ).over(ncd.Axis("n"))
    rng = np.random.default_rng(6)
    params = {n: rng.standard_normal(v.shape) for n, v in ncd.init(m, seed=0).items()}
    assert params["conv.weight"].shape == (ci, co // g, k)  # torch's layout
    x = rng.standard_normal((2, ci, length))
    want = _transposed_direct(x, params["conv.weight"], s, p, op, d, g)
    want += params["conv.bias"][:, None]
    np.testing.assert_allclose(ncd.run(m, x, params=params), want, atol=1e-12)


def test_conv_transpose1d_refuses_what_torch_refuses() -> None:
    with pytest.raises(DefinitionError, match="output_padding 2 must be smaller"):
        conv.conv_transpose1d(3, 3, 3, stride=2, output_padding=2)
    with pytest.raises(DefinitionError, match="padding 3 is more than dilation"):
        conv.conv_transpose1d(3, 3, 3, padding=3)


def test_a_negative_extra_pads_the_end_less() -> None:
    x = np.arange(5.0)[None, :]
    w = ops.window("l", "o", "j", j=1, padding=2, extra=-1, fill=0.5)  # F.pad(x, (2, 1), 0.5)
    np.testing.assert_array_equal(
        ncd.run(w.over(ncd.Axis("c", size=1)), x)[..., 0],
        [[0.5, 0.5, 0.0, 1.0, 2.0, 3.0, 4.0, 0.5]],
    )
    with pytest.raises(DefinitionError, match="extra -3 would cut into the input"):
        ops.window("l", "o", "j", j=1, padding=2, extra=-3)
