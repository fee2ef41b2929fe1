"""The reductions of issue 15 (the primitive prod; logsumexp, var/std, argmax/argmin, max/min
with indices, cumsum/cumprod composed) on the reference against NumPy written out here, at
sizes 1, 7, 13 and 301, with non-finite rows; their JSON round trip, gradients against finite
differences, typed errors."""

from __future__ import annotations

import importlib.util

import numpy as np
import pytest

import ncd
from ncd import ops

RNG = np.random.default_rng(15)
SIZES = (1, 7, 13, 301)


def _rows(n: int) -> np.ndarray:
    """Five rows of ``n``: random, all -inf, a +inf, a NaN, ties (the first must win)."""
    x = RNG.standard_normal((5, n)).astype(np.float32)
    x[1] = -np.inf
    x[2, n // 2] = np.inf
    x[3, n - 1] = np.nan
    x[4] = np.round(x[4])
    if n > 2:
        x[4, 1] = x[4, n - 1] = 9.0
    return x


def _on(term: ncd.Term, n: int, rows: int = 5) -> tuple[ncd.Term, ncd.Axis]:
    c = ncd.Axis("c", size=n)
    return ncd.identity([ncd.Axis("r", size=rows), c]) >> term, c


def _logsumexp(x: np.ndarray) -> np.ndarray:
    out = np.empty(x.shape[0], dtype=np.float64)
    for i, row in enumerate(x.astype(np.float64)):
        if np.isnan(row).any():
            out[i] = np.nan
        elif np.isposinf(row).any():
            out[i] = np.inf
        elif np.isneginf(row).all():
            out[i] = -np.inf
        else:
            m = row[np.isfinite(row)].max()
            out[i] = m + np.log(np.sum(np.exp(row - m)))
    return out


def _first(x: np.ndarray, pick: str) -> np.ndarray:
    out = np.empty(x.shape[0])
    for i, row in enumerate(x):
        nans = np.flatnonzero(np.isnan(row))
        if nans.size:
            out[i] = nans[0]
            continue
        best = 0
        for j in range(1, row.size):
            if (row[j] > row[best]) if pick == "max" else (row[j] < row[best]):
                best = j
        out[i] = best
    return out


def _var(x: np.ndarray, correction: int) -> np.ndarray:
    x = x.astype(np.float64)
    n = x.shape[1]
    mean = x.sum(axis=1, keepdims=True) / n
    with np.errstate(invalid="ignore", divide="ignore"):
        return ((x - mean) ** 2).sum(axis=1) / (n - correction)


def _running(x: np.ndarray, fn: str) -> np.ndarray:
    out = np.zeros(x.shape, dtype=np.float64)
    for i, row in enumerate(x.astype(np.float64)):
        acc = 0.0 if fn == "sum" else 1.0
        for j, v in enumerate(row):
            acc = acc + v if fn == "sum" else acc * v
            out[i, j] = acc
    return out


@pytest.mark.filterwarnings("ignore::RuntimeWarning")
@pytest.mark.parametrize("n", SIZES)
def test_reference_against_numpy(n: int) -> None:
    x = _rows(n)
    close = dict(rtol=1e-5, atol=1e-5)
    m, _ = _on(ops.logsumexp("c"), n)
    np.testing.assert_allclose(ncd.run(m, x), _logsumexp(x), **close)
    for pick, op in (("max", ops.argmax), ("min", ops.argmin)):
        m, _ = _on(op("c"), n)
        np.testing.assert_array_equal(ncd.run(m, x), _first(x, pick))
    m, _ = _on(ops.max_with_indices("c"), n)
    values, index = ncd.run(m, x)
    np.testing.assert_array_equal(index, _first(x, "max"))
    want = np.array([np.nan if np.isnan(r).any() else r.max() for r in x])
    np.testing.assert_array_equal(values, want)
    for corr in (0, 1):
        if corr <= n:
            m, _ = _on(ops.var("c", correction=corr), n)
            np.testing.assert_allclose(ncd.run(m, x), _var(x, corr), **close)
            m, _ = _on(ops.std("c", correction=corr), n)
            np.testing.assert_allclose(ncd.run(m, x), np.sqrt(_var(x, corr)), **close)
    m, _ = _on(ops.cumsum("c", "c_cum"), n)
    np.testing.assert_allclose(ncd.run(m, x), _running(x, "sum"), rtol=1e-5, atol=1e-4)
    small = np.where(np.isfinite(x), 0.5 + 0.5 * np.abs(x), x).astype(np.float32)
    small[0, n // 3] = 0.0
    m, _ = _on(ops.cumprod("c", "c_cum"), n)
    np.testing.assert_allclose(ncd.run(m, small), _running(small, "prod"), rtol=1e-5, atol=0)
    m, _ = _on(ops.prod("c"), n)
    np.testing.assert_allclose(ncd.run(m, small), _running(small, "prod")[:, -1], rtol=1e-5)


@pytest.mark.filterwarnings("ignore::RuntimeWarning")
def test_cumsum_keeps_its_axis_and_nan_reaches_only_later_positions() -> None:
    x = np.array([[1.0, 2.0, np.nan, 4.0, np.inf, 1.0]], dtype=np.float32)
    m, c = _on(ops.cumsum("c"), 6, rows=1)
    got = ncd.run(m, x)
    (out,) = m.codomain
    assert c in out.axes
    got = np.moveaxis(got, out.axes.index(c), -1).reshape(-1)
    np.testing.assert_array_equal(got, [1.0, 3.0, np.nan, np.nan, np.nan, np.nan])
    y = np.array([[1.0, np.inf, 2.0, -1.0]], dtype=np.float32)
    m, c = _on(ops.cumsum("c", "k"), 4, rows=1)
    np.testing.assert_array_equal(ncd.run(m, y).reshape(-1), [1.0, np.inf, np.inf, np.inf])


def test_json_round_trip() -> None:
    for term in (
        ops.prod("c"),
        ops.cumprod("c"),
        ops.logsumexp("c"),
        ops.var("c"),
        ops.std("c", correction=0),
        ops.argmax("c"),
        ops.argmin("c"),
        ops.max_with_indices("c"),
        ops.cumsum("c", "k"),
    ):
        m, _ = _on(term, 7)
        back = ncd.from_json(ncd.to_json(m))
        assert back.graph == m.graph
        x = _rows(7)
        with np.errstate(all="ignore"):
            a, b = ncd.run(m, x), ncd.run(back, x)
        for u, v in zip(a if isinstance(a, tuple) else [a], b if isinstance(b, tuple) else [b]):
            np.testing.assert_array_equal(u, v)


@pytest.mark.parametrize("n", (1, 7, 13))
def test_gradients_against_finite_differences(n: int) -> None:
    spec = importlib.util.spec_from_file_location("_grad", __file__.replace("reductions", "grad"))
    assert spec and spec.loader
    grad = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(grad)
    x = RNG.standard_normal((5, n))
    for term in (ops.logsumexp("c"), ops.var("c", correction=0)):
        m, _ = _on(term, n)
        grad.check(m.cast("float64"), x, tol=1e-5)
    if n > 1:  # a single element: std's root at 0 has no derivative (NaN, as in torch)
        for term in (ops.var("c"), ops.std("c")):
            m, _ = _on(term, n)
            grad.check(m.cast("float64"), x, tol=1e-5)
    for term in (ops.cumsum("c", "k"), ops.cumprod("c"), ops.prod("c")):
        m, _ = _on(term, n)
        grad.check(m.cast("float64"), x, tol=1e-5)
    # zeros: one in a row (its gradient is the product of the others), two (all zero)
    z = x.copy()
    z[0, 0] = 0.0
    z[1, :2] = 0.0 if n > 1 else z[1, :2]
    m, _ = _on(ops.prod("c"), n)
    grad.check(m.cast("float64"), z, tol=1e-5)


def test_prod_gradient_over_two_axes_with_zeros() -> None:
    spec = importlib.util.spec_from_file_location("_grad", __file__.replace("reductions", "grad"))
    assert spec and spec.loader
    grad = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(grad)
    r, a, b = ncd.Axis("r", size=4), ncd.Axis("a", size=3), ncd.Axis("b", size=5)
    x = RNG.standard_normal((4, 3, 5))
    x[0, 1, 2] = 0.0
    x[1, 0, 0] = x[1, 2, 4] = 0.0
    m = ncd.identity([r, a, b]) >> ops.prod([a, b])
    grad.check(m.cast("float64"), x, tol=1e-5)
    np.testing.assert_allclose(ncd.run(m, x), x.prod(axis=(1, 2)), rtol=1e-12)


def test_typed_errors() -> None:
    with pytest.raises(ncd.SizeError, match=r"correction 3 is larger.*Fix:"):
        ops.var(ncd.Axis("c", size=2), correction=3)
    with pytest.raises(ncd.DefinitionError, match=r"correction must be an int >= 0.*Fix:"):
        ops.var("c", correction=-1)
    with pytest.raises(ncd.DefinitionError, match=r"logsumexp: expected one axis.*Fix:"):
        ops.logsumexp("a b")
    with pytest.raises(ncd.DefinitionError, match=r"cumsum: out must be a new axis.*Fix:"):
        c = ncd.Axis("c", size=3)
        ops.cumsum(c, c)
    # an axis that is not there (sized): the builder's size conflict names both axes
    with pytest.raises(ncd.SizeError, match=r"(?s)z#.*c#.*Fix:"):
        _on(ops.argmax(ncd.Axis("z", size=4)), 7)[0].graph
