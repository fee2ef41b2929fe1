"""ncd-opencl's broadcast GEMM (``ncd_opencl.outer``): contractions of two values read from
memory with the contracted axes anywhere (a weight's gradient sums the leading token axes;
``dY W`` reads the weight by its first axis), against the reference at awkward sizes with
non-finite inputs, with an elementwise epilogue and renames; what it declines."""

from __future__ import annotations

import numpy as np
import pytest

import ncd
from ncd import ops
from ncd_opencl.generate import generate

pytest.importorskip("pyopencl")


def _styles(model: ncd.Term) -> list[str]:
    return [k.style for k in generate(model.graph).kernels if k.text]


def _check(model: ncd.Term, *shapes: tuple[int, ...], seed: int = 0) -> None:
    rng = np.random.default_rng(seed)
    xs = [rng.standard_normal(s).astype(np.float32) for s in shapes]
    if xs[0].size > 2:
        xs[0].flat[1] = np.inf
        xs[0].flat[2] = np.nan
    want = ncd.run(model, *[x.astype(np.float64) for x in xs])
    for lanes in (8, 16):  # float8 blocks, and float16 ones where |n| is a multiple of 16
        got = ncd.compile(model, "opencl", lanes=lanes)(*xs)
        np.testing.assert_array_equal(np.isnan(got), np.isnan(want))
        ok = np.isfinite(want)
        np.testing.assert_allclose(got[ok], want[ok], rtol=1e-4, atol=1e-4)
        np.testing.assert_array_equal(got[~ok & ~np.isnan(want)], want[~ok & ~np.isnan(want)])


@pytest.mark.parametrize("t", [1, 7, 13])
@pytest.mark.parametrize(("m", "n"), [(1, 8), (7, 16), (13, 24), (301, 8), (13, 48)])
def test_weight_gradient_sums_the_leading_token_axes(t: int, m: int, n: int) -> None:
    model = ops.einsum("b t i, b t o -> i o").bind(b=2, t=t, i=m, o=n)
    assert _styles(model) == ["outer"]
    _check(model, (2, t, m), (2, t, n), seed=t * 100 + m)


@pytest.mark.parametrize(("t", "k", "n"), [(7, 13, 16), (1, 1, 8), (13, 301, 24), (301, 7, 32)])
def test_activation_times_a_weight_read_by_its_first_axis(t: int, k: int, n: int) -> None:
    model = ops.einsum("t k, k n -> t n").bind(t=t, k=k, n=n)
    assert _styles(model) == ["outer"]
    _check(model, (t, k), (k, n), seed=k)


def test_sixteen_lanes_render_float16_blocks_where_n_allows() -> None:
    wide = ops.einsum("t k, k n -> t n").bind(t=13, k=7, n=32)
    (src,) = generate(wide.graph, lanes=16).kernels
    assert "float16 c7_1" in src.text and "ncd_float16u" in src.text
    narrow = ops.einsum("t k, k n -> t n").bind(t=13, k=7, n=24)  # not a multiple of 16
    (src,) = generate(narrow.graph, lanes=16).kernels
    assert "float16" not in src.text and "float8 c3_1" in src.text


def test_outer_axes_of_both_operands_and_an_epilogue() -> None:
    # M from A over two axes, N from B over two axes (its unit-stride axis last), a relu and a
    # product with a third value after the sum
    prod = ops.einsum("t h d, t e n -> h d e n").bind(t=5, h=3, d=7, e=2, n=16)
    model = ncd.trace(
        lambda a, b, c: ops.mul()(ops.relu()(prod(a, b)), c),
        inputs=[
            *[prod.graph.values[v] for v in prod.graph.inputs],
            prod.graph.values[prod.graph.outputs[0]],
        ],
    )
    assert _styles(model) == ["outer"]
    _check(model, (5, 3, 7), (5, 2, 16), (3, 7, 2, 16))


def test_declines_what_it_cannot_render() -> None:
    batched = ops.einsum("h t i, h t o -> h i o").bind(h=2, t=5, i=7, o=16)
    assert _styles(batched) != ["outer"]  # an axis in both operands and the output
    ragged = ops.einsum("t i, t o -> i o").bind(t=5, i=7, o=13)
    assert _styles(ragged) != ["outer"]  # |n| not a multiple of 8
    _check(batched, (2, 5, 7), (2, 5, 16))
    _check(ragged, (5, 7), (5, 13))
