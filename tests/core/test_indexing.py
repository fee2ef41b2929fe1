"""The reference of the select, slice, concatenation, rotary, gather, index-ramp, comparison and
pad ops, and the trig functions of the unary table: against NumPy written out here, at sizes 1,
7, 13 and 301, with non-finite inputs, through JSON, their gradients, and their errors; the
one-hot rows of ``ncd.grad`` and ``nn.cross_entropy`` built in O(|vocab|)."""

from __future__ import annotations

import numpy as np
import pytest

import ncd
from ncd import nn, ops
from ncd._term import identity
from ncd.axis import ArrayType

SIZES = (1, 7, 13, 301)
RNG = np.random.default_rng(12)


def _a(name: str, n: int) -> ncd.Axis:
    return ncd.Axis(name, size=n)


def _nonfinite(shape: tuple[int, ...]) -> np.ndarray:
    x = RNG.standard_normal(shape)
    flat = x.reshape(-1)
    flat[:: max(1, flat.size // 3)] = np.inf
    flat[1 :: max(2, flat.size // 2)] = np.nan
    flat[-1] = -np.inf
    return x


@pytest.mark.filterwarnings("ignore::RuntimeWarning")
@pytest.mark.parametrize("fn", ["cos", "sin", "atan", "asinh"])
@pytest.mark.parametrize("n", SIZES)
def test_trig_matches_numpy_with_nonfinite_inputs(fn: str, n: int) -> None:
    x = _nonfinite((n, 7))
    got = ncd.run(ops.unary(fn).over(_a("r", n), _a("c", 7)), x)
    want = {"cos": np.cos, "sin": np.sin, "atan": np.arctan, "asinh": np.arcsinh}[fn](x)
    np.testing.assert_array_equal(got, want)


@pytest.mark.parametrize("n", SIZES)
def test_where_selects_and_broadcasts(n: int) -> None:
    r, c = _a("r", n), _a("c", 7)
    cond = RNG.integers(0, 2, (n, 7)).astype(np.float64)
    cond[0, 0] = np.nan  # NaN is true, as in NumPy and torch
    x, y = _nonfinite((7,)), RNG.standard_normal((n, 7))
    got = ncd.run(identity((r, c), (c,), (r, c)) >> ops.where(), cond, x, y)
    np.testing.assert_array_equal(got, np.where(cond != 0, x[None, :], y))
    assert got[0, 0] == x[0] or (np.isnan(got[0, 0]) and np.isnan(x[0]))


def test_where_takes_a_bool_condition() -> None:
    r = _a("r", 13)
    cond = RNG.integers(0, 2, 13).astype(bool)
    x, y = RNG.standard_normal(13), RNG.standard_normal(13)
    got = ncd.run(identity((r,), (r,), (r,)) >> ops.where(), cond, x, y)
    np.testing.assert_array_equal(got, np.where(cond, x, y))


@pytest.mark.parametrize("n", SIZES)
def test_slice_reads_a_window(n: int) -> None:
    start = n // 3
    m = n - start
    x = _nonfinite((5, n))
    got = ncd.run(ops.slice(_a("d", n), "e", start=start, e=m).over(_a("r", 5)), x)
    np.testing.assert_array_equal(got, x[:, start:])


@pytest.mark.parametrize("n", SIZES)
def test_slice_from_the_end_reads_the_same_elements_at_every_length(n: int) -> None:
    model = ops.slice(ncd.Axis("d"), "e", start=0, from_end=True, e=1).over(_a("r", 5))
    x = _nonfinite((5, n))
    np.testing.assert_array_equal(ncd.run(model, x), x[:, -1:])
    if n >= 3:
        model = ops.slice(ncd.Axis("d"), "e", start=1, from_end=True, e=2).over(_a("r", 5))
        np.testing.assert_array_equal(ncd.run(model, x), x[:, -3:-1])
    else:
        with pytest.raises(ncd.NcdError, match=r"the last 3 elements of d.*Fix: .*at least 3"):
            ncd.run(ops.slice(ncd.Axis("d"), "e", start=1, from_end=True, e=2), x[0])


@pytest.mark.parametrize("n", (3, 7, 13))
def test_slice_from_the_end_gradient_puts_the_cotangent_back_in_place(n: int) -> None:
    d = _a("d", n)
    model = ops.slice(d, "e", start=1, from_end=True, e=2) >> ops.square() >> ops.sum("e")
    x = RNG.standard_normal(n)
    _, (g,) = ncd.run(ncd.grad(model, wrt="inputs"), x)
    want = np.zeros(n)
    want[n - 3 : n - 1] = 2.0 * x[n - 3 : n - 1]
    np.testing.assert_allclose(g, want)


@pytest.mark.parametrize("n", SIZES)
def test_concat_joins_end_to_end(n: int) -> None:
    r, a, b = _a("r", 3), _a("a", n), _a("b", 7)
    x, y = _nonfinite((3, n)), RNG.standard_normal(7)
    model = identity((r, a), (b,)) >> ops.concat("a, b -> c", a=a, b=b, c=n + 7)
    got = ncd.run(model, x, y)
    np.testing.assert_array_equal(got, np.concatenate([x, np.broadcast_to(y, (3, 7))], -1))


def _rope(x: np.ndarray, base: float) -> np.ndarray:
    """RoFormer's rotation written pair by pair: (x_j, x_{j+h}) turns by t * base^(-2j/d)."""
    n, d = x.shape[-2:]
    h = d // 2
    out = np.empty_like(x)
    for t in range(n):
        for j in range(h):
            theta = t * base ** (-2.0 * j / d)
            a, b = x[..., t, j], x[..., t, j + h]
            out[..., t, j] = a * np.cos(theta) - b * np.sin(theta)
            out[..., t, j + h] = b * np.cos(theta) + a * np.sin(theta)
    return out


@pytest.mark.parametrize("n", SIZES)
@pytest.mark.parametrize("d", [2, 8])
def test_rotary_is_the_pairwise_rotation(n: int, d: int) -> None:
    x = RNG.standard_normal((3, n, d))
    model = ops.rotary(_a("s", n), _a("e", d), base=500.0).over(_a("h", 3))
    np.testing.assert_allclose(ncd.run(model, x), _rope(x, 500.0), rtol=1e-12, atol=1e-12)


def test_rotary_keeps_norms_and_position_zero() -> None:
    x = RNG.standard_normal((13, 16))
    y = ncd.run(ops.rotary(_a("s", 13), _a("e", 16)), x)
    np.testing.assert_array_equal(y[0], x[0])
    np.testing.assert_allclose(np.linalg.norm(y, axis=-1), np.linalg.norm(x, axis=-1))


def test_rotary_propagates_nonfinite_values_of_its_pair_only() -> None:
    x = RNG.standard_normal((7, 4))
    x[3, 1] = np.inf
    y = ncd.run(ops.rotary(_a("s", 7), _a("e", 4)), x)
    bad = ~np.isfinite(y)
    assert bad[3, 1] and bad[3, 3] and bad.sum() == 2


@pytest.mark.parametrize(
    "model",
    [
        lambda: ops.slice(_a("d", 13), "e", start=5, e=7).over(_a("r", 3)),
        lambda: (
            identity((_a("r", 3),), (_a("r2", 4),))
            >> ops.concat("a, b -> c", a=_a("a", 3), b=_a("b", 4), c=7)
        ),
        lambda: ops.rotary(_a("s", 7), _a("e", 6), base=1234.5).over(_a("h", 2)),
        lambda: ops.slice(_a("d", 13), "e", start=2, from_end=True, e=3).over(_a("r", 3)),
        lambda: identity((_a("r", 5),), (_a("r", 5),), (_a("r", 5),)) >> ops.where(),
        lambda: ops.cos().over(_a("r", 5)) >> ops.asinh(),
    ],
    ids=["slice", "concat", "rotary", "slice_from_end", "where", "cos_asinh"],
)
def test_json_round_trip(model: object) -> None:
    m = model()  # type: ignore[operator]
    back = ncd.from_json(ncd.to_json(m))
    xs = [RNG.standard_normal(m.graph.shape(v)) for v in m.graph.inputs]
    np.testing.assert_array_equal(ncd.run(back, *xs), ncd.run(m, *xs))


def test_errors_name_axes_sizes_and_the_fix() -> None:
    with pytest.raises(ncd.DefinitionError, match=r"ends past its size 13.*Fix"):
        ops.slice(_a("d", 13), "e", start=10, e=7)
    with pytest.raises(ncd.DefinitionError, match=r"odd.*Fix: give e an even size"):
        ops.rotary(_a("s", 7), _a("e", 5))
    with pytest.raises(ncd.DefinitionError, match=r"do not fill c.*Fix"):
        ops.concat("a, b -> c", a=3, b=4, c=8)
    with pytest.raises(ncd.DefinitionError, match=r"one axis per input"):
        ops.concat("a b -> c")
    with pytest.raises(ncd.DefinitionError, match=r"Fix: give the slice a new axis"):
        d = _a("d", 4)
        ops.slice(d, d)


def test_gpt_block_size_reads_the_first_positions_of_its_table() -> None:
    """``nn.gpt(block_size=16)`` at a length n gives the first n rows of the model bound to
    16 (causal: later tokens change nothing before them), at 1, 7 and 13; 17 is refused."""
    sizes = {"d_model": 8, "heads": 2, "d_head": 4, "d_ff": 13, "vocab": 11}
    short = ncd.nn.gpt(2, block_size=16).bind(**sizes)
    full = ncd.nn.gpt(2).bind(seq=16, **sizes)
    assert [v.label for v in short.config().free] == ["seq"]
    params = ncd.init(short, seed=0)
    assert params["wpe.weight"].shape == (16, 8) and set(params) == set(ncd.init(full, seed=0))
    ids = RNG.integers(0, 11, 16)
    want = ncd.run(full, ids, params=params)
    for n in (1, 7, 13, 16):
        np.testing.assert_allclose(ncd.run(short, ids[:n], params=params), want[:n], atol=1e-6)
    with pytest.raises(ncd.DefinitionError, match=r"\[0:17\] of block.*ends past its size 16"):
        ncd.run(short, np.append(ids, 0), params=params)


@pytest.mark.parametrize("n", SIZES)
@pytest.mark.parametrize("fn", ["lt", "le", "gt", "ge", "eq", "ne"])
def test_comparisons_are_ieee_truths_as_bool_wires(n: int, fn: str) -> None:
    r, c = _a("r", n), _a("c", 7)
    x = _nonfinite((n, 7))
    y = np.where(RNG.random((n, 7)) < 0.3, x, RNG.standard_normal((n, 7)))  # ties too
    y[0, 0] = np.nan
    want = {
        "lt": np.less,
        "le": np.less_equal,
        "gt": np.greater,
        "ge": np.greater_equal,
        "eq": np.equal,
        "ne": np.not_equal,
    }[fn]
    got = ncd.run(identity((r, c), (r, c)) >> ops.binary(fn), x, y)
    np.testing.assert_array_equal(got, want(x, y))
    assert got.dtype == np.bool_
    scalar = ncd.run(ops.scalar(fn, 0.5).over(r, c), x)
    np.testing.assert_array_equal(scalar, want(x, 0.5))
    assert scalar.dtype == np.bool_


def test_comparisons_have_no_gradient() -> None:
    r = _a("r", 7)
    model = identity((r,), (r,)) >> ops.binary("gt") >> ops.sum("r")
    _, grads = ncd.run(ncd.grad(model, wrt="inputs"), RNG.standard_normal(7), np.zeros(7))
    for g in grads:
        np.testing.assert_array_equal(g, np.zeros(7))


@pytest.mark.parametrize("n", SIZES)
def test_pad_is_numpy_constant_pad(n: int) -> None:
    x = _nonfinite((3, n))
    model = ops.pad(_a("l", n), "lp", before=2, after=3, value=-1.5).over(_a("r", 3))
    want = np.pad(x, ((0, 0), (2, 3)), constant_values=-1.5)
    np.testing.assert_array_equal(ncd.run(model, x), want)
    free = ops.pad(ncd.Axis("l"), "lp", after=1, value=-np.inf).over(_a("r", 3))
    np.testing.assert_array_equal(
        ncd.run(free, x), np.pad(x, ((0, 0), (0, 1)), constant_values=-np.inf)
    )


def test_pad_gradient_is_the_interior_of_the_cotangent() -> None:
    model = ops.pad(_a("l", 7), "lp", before=1, after=2) >> ops.square() >> ops.sum("lp")
    x = RNG.standard_normal(7)
    _, (g,) = ncd.run(ncd.grad(model, wrt="inputs"), x)
    np.testing.assert_allclose(g, 2.0 * x)


def test_pad_refuses_a_crop() -> None:
    with pytest.raises(
        ncd.DefinitionError, match=r"before must be a count of elements >= 0.*slice"
    ):
        ops.pad("l", "lp", before=-1)


def _ids(*axes: ncd.Axis) -> ArrayType:
    return ArrayType(tuple(axes), "int64")


@pytest.mark.parametrize("v", SIZES)
def test_gather_reads_rows_of_a_value(v: int) -> None:
    b, s, d = _a("b", 3), _a("s", 7), _a("d", 5)
    table = _nonfinite((v, 5))
    ids = RNG.integers(0, v, (3, 7))
    got = ncd.run(identity(_ids(b, s), (_a("v", v), d)) >> ops.gather("v"), ids, table)
    np.testing.assert_array_equal(got, table[ids])  # NaN and inf rows come through as they are


@pytest.mark.parametrize("v", SIZES)
def test_gather_along_shared_axes_is_take_along_axis(v: int) -> None:
    b, s = _a("b", 2), _a("s", 13)
    logits = _nonfinite((2, 13, v))
    ids = RNG.integers(0, v, (2, 13))
    model = identity(_ids(b, s), (b, s, _a("v", v))) >> ops.gather("v")
    want = np.take_along_axis(logits, ids[..., None], -1)[..., 0]
    np.testing.assert_array_equal(ncd.run(model, ids, logits), want)


@pytest.mark.parametrize("n", SIZES)
def test_arange_is_the_index_ramp(n: int) -> None:
    got = ncd.run(ops.arange(_a("n", n), start=-2.0, step=0.25))
    np.testing.assert_array_equal(got, -2.0 + 0.25 * np.arange(n, dtype=np.float32))
    assert got.dtype == np.float32


@pytest.mark.parametrize("v", (1, 7, 13))
def test_gather_gradient_is_a_scatter_add(v: int) -> None:
    b, s, d = _a("b", 2), _a("s", 7), _a("d", 3)
    model = identity(_ids(b, s), (_a("v", v), d)) >> ops.gather("v") >> ops.square()
    model = model >> ops.sum((b, s, d))
    table = RNG.standard_normal((v, 3))
    ids = RNG.integers(0, v, (2, 7))  # repeated ids: their contributions add
    _, grads = ncd.run(ncd.grad(model, wrt=[1]), ids, table)
    want = np.zeros_like(table)
    np.add.at(want, ids, 2.0 * table[ids])
    np.testing.assert_allclose(next(iter(grads.values())), want, rtol=1e-6)


def test_out_of_range_ids_are_refused_before_anything_runs() -> None:
    b, v, d = _a("b", 4), _a("v", 7), _a("d", 2)
    model = identity(_ids(b), (v, d)) >> ops.gather("v")
    table = RNG.standard_normal((7, 2))
    for bad in (7, -1):
        ids = np.array([0, 3, bad, 1])
        with pytest.raises(ncd.IndexRangeError, match=r"must lie in \[0, 7\).*v.*Fix"):
            ncd.run(model, ids, table)


def test_float_ids_are_refused_with_the_fix() -> None:
    b, v = _a("b", 4), _a("v", 7)
    with pytest.raises(ncd.DTypeError, match=r"int64 ids"):
        (identity((b,), (v,)) >> ops.gather("v")).graph.verify()


def test_gather_and_arange_json_round_trip() -> None:
    b, v, d, n = _a("b", 4), _a("v", 7), _a("d", 2), _a("n", 2)
    model = (identity(_ids(b), (v, d)) >> ops.gather("v")) @ ops.arange(n, start=1.5)
    back = ncd.from_json(ncd.to_json(model))
    ids, table = RNG.integers(0, 7, 4), RNG.standard_normal((7, 2))
    for g, w in zip(ncd.run(back, ids, table), ncd.run(model, ids, table), strict=True):
        np.testing.assert_array_equal(g, w)


def _largest(graph: object) -> int:
    g = graph  # a Graph
    return max(int(np.prod(g.shape(v))) for v in range(len(g.values)))  # type: ignore[attr-defined]


def test_one_hot_rows_hold_no_vocab_square() -> None:
    """The gradient of an embedding and the cross-entropy build their one-hot rows on an index
    ramp: no value in either graph has |vocab|^2 elements (GPT-2's vocabulary would make
    2.5e9)."""
    vocab, seq = 5003, 3
    lm = nn.gpt(1).bind(vocab=vocab, seq=seq, d_model=4, heads=1, d_head=4, d_ff=4)
    loss_model = lm >> nn.cross_entropy()
    train = ncd.grad(loss_model)
    assert _largest(train.graph) < vocab * vocab // 100
    toks = RNG.integers(0, vocab, seq)
    loss, grads = ncd.run(train, toks, toks, params=ncd.init(loss_model, seed=0))
    (wte,) = (g for name, g in grads.items() if name.endswith("wte.weight"))
    assert np.isfinite(loss) and wte.shape == (vocab, 4) and np.isfinite(wte).all()
