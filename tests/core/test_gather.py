"""``ops.gather`` (a value read at integer ids) and ``ops.arange`` (the index along an axis as a
value): their reference against NumPy written out here at sizes 1, 7, 13 and 301 with
non-finite tables, their gradients against a scatter-add, the range check, JSON, and the one-hot
rows of ``ncd.grad`` and ``nn.cross_entropy`` built in O(|vocab|) (no vocab x vocab square)."""

from __future__ import annotations

import numpy as np
import pytest

import ncd
from ncd import nn, ops
from ncd._term import identity
from ncd.axis import ArrayType

SIZES = (1, 7, 13, 301)
RNG = np.random.default_rng(21)


def _a(name: str, n: int) -> ncd.Axis:
    return ncd.Axis(name, size=n)


def _ids(*axes: ncd.Axis) -> ArrayType:
    return ArrayType(tuple(axes), "int64")


def _nonfinite(shape: tuple[int, ...]) -> np.ndarray:
    x = RNG.standard_normal(shape)
    flat = x.reshape(-1)
    flat[:: max(1, flat.size // 3)] = np.inf
    flat[1 :: max(2, flat.size // 2)] = np.nan
    flat[-1] = -np.inf
    return x


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


def test_json_round_trip() -> None:
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
