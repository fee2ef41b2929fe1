"""Seeded random draws (issue 15): ``ops.uniform``/``normal``/``bernoulli`` are pure functions of
the seed and the position (the counter-based generator of seeded dropout), so a draw is the
same at every call, differs between seeds, has the moments of its distribution at sizes 1, 7,
13 and 301, round-trips through JSON and has no gradient; bad constants are typed errors. The
backends' draws are checked against these by the conformance cases (``random_*``)."""

from __future__ import annotations

import math

import numpy as np
import pytest

import ncd
from ncd import counter_rng, ops
from ncd.errors import DefinitionError
from ncd.primitives.random import Random


@pytest.mark.parametrize("n", [1, 7, 13, 301])
def test_a_draw_is_a_function_of_seed_and_position(n: int) -> None:
    m = ops.uniform("s d", seed=4, s=n, d=7)
    a, b = ncd.run(m), ncd.run(m)
    np.testing.assert_array_equal(a, b)
    assert a.shape == (n, 7) and a.dtype == np.float32
    other = ncd.run(ops.uniform("s d", seed=5, s=n, d=7))
    assert not np.array_equal(a, other)
    # the element at (i, j) is the draw of its row-major position over (d, s) by name
    op = Random((ncd.Axis("d", size=7), ncd.Axis("s", size=n)), "uniform", 4)
    np.testing.assert_array_equal(a.T, op.draw(np.arange(7 * n).reshape(7, n)).astype(np.float32))


def test_the_distributions_have_their_moments() -> None:
    n = 200_000
    u = ncd.run(ops.uniform("x", -2.0, 3.0, seed=1, x=n)).astype(np.float64)
    assert -2.0 < u.min() and u.max() < 3.0
    assert abs(u.mean() - 0.5) < 0.02 and abs(u.var() - 25 / 12) < 0.03
    z = ncd.run(ops.normal("x", 1.0, 0.5, seed=2, x=n)).astype(np.float64)
    assert abs(z.mean() - 1.0) < 0.005 and abs(z.std() - 0.5) < 0.005
    assert np.isfinite(z).all()
    k = ncd.run(ops.bernoulli("x", 0.3, seed=3, x=n))
    assert set(np.unique(k)) <= {0.0, 1.0} and abs(k.mean() - 0.3) < 0.005


def test_bernoulli_is_dropouts_drop_mask() -> None:
    x = ncd.Axis("x", size=1000)
    drawn = ncd.run(ops.bernoulli(x, 0.25, seed=9))
    keep = counter_rng.keep_mask([x], {x: 1000}, 0.25, 9)
    key = counter_rng.key(9)
    assert counter_rng.key(9) == key
    # same stream as dropout's mask: dropped exactly where the bits fall below the threshold
    np.testing.assert_array_equal(drawn == 1.0, ~keep)


def test_extremes() -> None:
    assert ncd.run(ops.bernoulli("x", 0.0, x=13)).sum() == 0.0
    assert ncd.run(ops.bernoulli("x", 1.0, x=13)).sum() == 13.0
    np.testing.assert_array_equal(ncd.run(ops.normal("x", 2.0, 0.0, x=7)), np.full(7, 2.0))
    np.testing.assert_array_equal(ncd.run(ops.uniform("x", 1.5, 1.5, x=7)), np.full(7, 1.5))


def test_json_round_trip_and_no_gradient() -> None:
    m = ops.normal("s", seed=11, s=13)
    back = ncd.from_json(ncd.to_json(m))
    assert back.graph == m.graph
    np.testing.assert_array_equal(ncd.run(back), ncd.run(m))
    r = ncd.Axis("r", size=13)
    noisy = ncd._term.identity([r]) @ ops.normal(r, seed=1) >> ops.mul()
    grads = ncd.run(ncd.grad(noisy, wrt=[0], cotangents=True), np.ones(13), np.ones(13))[1]
    np.testing.assert_allclose(grads[0], ncd.run(ops.normal(r, seed=1)), rtol=1e-6)


@pytest.mark.parametrize(
    ("make", "words"),
    [
        (lambda: ops.bernoulli("x", 1.5, x=3), "p must be in"),
        (lambda: ops.normal("x", 0.0, -1.0, x=3), "std must be >= 0"),
        (lambda: ops.uniform("x", 2.0, 1.0, x=3), "low 2 is above high 1"),
        (lambda: ops.uniform("x", seed=-1, x=3), "seed must be an int"),
        (lambda: ops.uniform("x", seed=2**32, x=3), "seed must be an int"),
        (lambda: ops.normal("x", math.nan, x=3), "finite"),
    ],
)
def test_bad_constants_are_typed_errors(make: object, words: str) -> None:
    with pytest.raises(DefinitionError, match=words) as e:
        make()  # type: ignore[operator]
    assert "Fix" in str(e.value)
