"""Batch norm in training form (issue 15): the batch statistics, the running buffers and their
gradients, against a float64 NumPy statement of torch's ``train()`` mode; buffers get no
gradient."""

from __future__ import annotations

import numpy as np
import pytest

import ncd
from ncd import Axis, ops
from ncd.autodiff import GradError
from ncd.errors import DefinitionError, SizeError

# (batch, channels, spatial sizes): sizes 1, 7, 13 and 301, channels not a multiple of 8
CASES = [
    (4, 3, (5, 7)),
    (1, 7, (13,)),
    (301, 1, ()),
    (2, 13, (1, 7)),
]


def _axes(n: int, c: int, spatial: tuple[int, ...]) -> tuple[Axis, Axis, tuple[Axis, ...]]:
    ch = Axis("c", size=c)
    over = (Axis("batch", size=n), *(Axis(f"s{i}", size=s) for i, s in enumerate(spatial)))
    return ch, ch, over


def _want(x: np.ndarray, ps: dict[str, np.ndarray], momentum: float, eps: float = 1e-5) -> tuple:
    """torch's ``train()`` batch norm on ``[N C *spatial]``, written out in NumPy."""
    red = tuple(i for i in range(x.ndim) if i != 1)
    shape = [1, -1] + [1] * (x.ndim - 2)
    mean = x.mean(axis=red)
    var = x.var(axis=red)
    n = x.size // x.shape[1]
    y = (x - mean.reshape(shape)) / np.sqrt(var.reshape(shape) + eps)
    y = y * ps["bn.weight"].reshape(shape) + ps["bn.bias"].reshape(shape)
    rm = (1 - momentum) * ps["bn.running_mean"] + momentum * mean
    rv = (1 - momentum) * ps["bn.running_var"] + momentum * var * n / (n - 1) if n > 1 else None
    return y, rm, rv


def _params(c: int, seed: int = 1) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(seed)
    return {
        "bn.weight": rng.uniform(0.5, 2.0, c),
        "bn.bias": rng.standard_normal(c),
        "bn.running_mean": rng.standard_normal(c),
        "bn.running_var": rng.uniform(0.5, 2.0, c),
    }


@pytest.mark.parametrize("case", CASES, ids=str)
def test_training_form_matches_torch_semantics(case: tuple) -> None:
    n, c, spatial = case
    ch, _, over = _axes(n, c, spatial)
    x = np.random.default_rng(0).standard_normal((n, c, *spatial)) * 3 + 1
    ps = _params(c)
    want, rm, rv = _want(x, ps, 0.1)
    model = ops.batch_norm(ch, over=over)  # reads weight and bias only
    y = ncd.run(model, x, params={k: ps[k] for k in model.graph.params()})
    np.testing.assert_allclose(y, want, atol=1e-12)
    if n * int(np.prod(spatial)) > 1:
        got = ncd.run(ops.batch_norm(ch, over=over, running=True, momentum=0.1), x, params=ps)
        np.testing.assert_allclose(got[0], want, atol=1e-12)
        np.testing.assert_allclose(got[1], rm, atol=1e-12)
        np.testing.assert_allclose(got[2], rv, atol=1e-12)


@pytest.mark.filterwarnings("ignore::RuntimeWarning")
def test_a_nan_stays_in_its_channel() -> None:
    ch, _, over = _axes(3, 4, (7,))
    x = np.random.default_rng(2).standard_normal((3, 4, 7))
    x[1, 2, 3] = np.nan
    x[0, 0, 0] = np.inf
    ps = _params(4)
    y, m, v = ncd.run(ops.batch_norm(ch, over=over, running=True), x, params=ps)
    bad = np.zeros(4, bool)
    bad[[0, 2]] = True
    assert np.isnan(y[:, bad]).all() and np.isfinite(y[:, ~bad]).all()
    assert np.isnan(m[2]) and np.isinf(m[0]) and np.isfinite(m[[1, 3]]).all()
    assert np.isnan(v[bad]).all() and np.isfinite(v[~bad]).all()


def test_without_affine_has_only_the_buffers() -> None:
    ch, _, over = _axes(5, 3, (7,))
    model = ops.batch_norm(ch, over=over, affine=False, running=True, name="norm")
    assert sorted(model.graph.params()) == ["norm.running_mean", "norm.running_var"]
    assert all(p.buffer for p in model.graph.params().values())
    x = np.random.default_rng(3).standard_normal((5, 3, 7))
    ps = {"norm.running_mean": np.zeros(3), "norm.running_var": np.ones(3)}
    y = ncd.run(model, x, params=ps)[0]
    np.testing.assert_allclose(y.mean(axis=(0, 2)), 0.0, atol=1e-12)


def _central(f, x: np.ndarray, h: float = 1e-6) -> np.ndarray:
    g = np.zeros_like(x)
    for i in np.ndindex(x.shape):
        e = np.zeros_like(x)
        e[i] = h
        g[i] = (f(x + e) - f(x - e)) / (2 * h)
    return g


@pytest.mark.parametrize("case", [(3, 2, (5,)), (1, 3, (7,)), (7, 1, ())], ids=str)
def test_gradients_match_central_differences(case: tuple) -> None:
    n, c, spatial = case
    ch, _, over = _axes(n, c, spatial)
    rng = np.random.default_rng(4)
    x = rng.standard_normal((n, c, *spatial))
    r = rng.standard_normal((n, c, *spatial))  # a fixed cotangent: the loss is sum(r * y)
    ps = _params(c)
    model = ops.batch_norm(ch, over=over)
    dm = ncd.grad(model, ["bn.weight", "bn.bias", 0], cotangents=True)
    _, grads = ncd.run(dm, x, r, params={k: ps[k] for k in ("bn.weight", "bn.bias")})
    dw, db, dx = grads["bn.weight"], grads["bn.bias"], grads[0]

    def loss(xx: np.ndarray, p: dict[str, np.ndarray]) -> float:
        return float((r * _want(xx, p, 0.1)[0]).sum())

    np.testing.assert_allclose(dx, _central(lambda v: loss(v, ps), x), atol=1e-6)
    for key, got in (("bn.weight", dw), ("bn.bias", db)):
        num = _central(lambda v, k=key: loss(x, {**ps, k: v}), ps[key])
        np.testing.assert_allclose(got, num, atol=1e-6)


def test_buffers_get_no_gradient() -> None:
    ch, _, over = _axes(4, 3, (5,))
    trained = ops.batch_norm(ch, over=over) >> ops.sum([over[0], ch, over[1]])
    assert ncd.grad(trained).keys == ("bn.weight", "bn.bias")
    evaluated = ncd.identity([ch]) >> ops.batch_norm(ch) >> ops.sum(ch)
    assert ncd.grad(evaluated).keys == ("bn.weight", "bn.bias")
    with pytest.raises(GradError, match="buffer"):
        ncd.grad(evaluated, ["bn.running_mean"])


def test_bad_training_forms_are_refused_by_name() -> None:
    ch = Axis("c", size=3)
    b = Axis("batch", size=1)
    with pytest.raises(DefinitionError, match="other than the channels"):
        ops.batch_norm(ch, over=(b, ch))
    with pytest.raises(DefinitionError, match="momentum"):
        ops.batch_norm(ch, over=(b,), momentum=1.5)
    with pytest.raises(SizeError, match="1 value per channel"):
        ops.batch_norm(ch, over=(b, Axis("h", size=1)), running=True)
    with pytest.raises(SizeError, match="needs a size"):
        ops.batch_norm(Axis("c"), over=(b,))


def test_running_statistics_need_no_seed_and_carry_no_gradient() -> None:
    """The updated statistics pass through ``stop_gradient``: ``ncd.grad`` seeds the scalar
    loss only, and the gradients equal the model's without them."""
    ch, _, over = _axes(4, 3, (5,))
    every = [over[0], ch, over[1]]
    loss = ops.sum(every)
    with_stats = ops.batch_norm(ch, over=over, running=True) >> (loss @ ncd.identity(2))
    plain = ops.batch_norm(ch, over=over) >> ops.sum(every)
    x = np.random.default_rng(5).standard_normal((4, 3, 5)) ** 3
    ps = _params(3)
    (value, mean, var), grads = ncd.run(ncd.grad(with_stats, ["bn.weight", 0]), x, params=ps)
    want_value, want = ncd.run(
        ncd.grad(plain, ["bn.weight", 0]), x, params={k: ps[k] for k in ("bn.weight", "bn.bias")}
    )
    np.testing.assert_allclose(value, want_value, atol=1e-12)
    for k in ("bn.weight", 0):
        np.testing.assert_allclose(grads[k], want[k], atol=1e-12)
    assert mean.shape == var.shape == (3,)


def test_stop_gradient_is_the_identity_with_no_gradient() -> None:
    a = Axis("a", size=7)
    model = ncd.identity([a]) >> ops.square() >> ops.stop_gradient() >> ops.sum(a)
    both = ncd.identity([a]) >> ncd.copy(2) >> (ops.square() @ model) >> ops.add() >> ops.sum(a)
    x = np.arange(7.0) - 3
    np.testing.assert_allclose(ncd.run(model, x), (x**2).sum())
    _, (dx,) = ncd.run(ncd.grad(both, "inputs"), x)
    np.testing.assert_allclose(dx, 2 * x)  # the stopped branch adds nothing
