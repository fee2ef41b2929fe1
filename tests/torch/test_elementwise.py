"""The rest of the elementwise family (issue 15): the rounding, sign, trig/hyperbolic, expm1/log1p
and fixed-constant activations of the unary table, the ``Activation`` op (leaky_relu, elu, celu,
softplus with their constants) and ``ops.clamp``. Each against torch's own function in float64
(the definition the import promises) at sizes 1, 7, 13 and 301 with infinities and NaN, on OpenCL
in float32 against the reference, through JSON, and its gradient against finite differences;
with the errors of bad constants."""

from __future__ import annotations

import warnings
from collections.abc import Callable
from typing import Any

import numpy as np
import pytest
import torch
import torch.nn.functional as F

import ncd
from ncd import ops
from ncd.errors import DefinitionError

SIZES = (1, 7, 13, 301)
RNG = np.random.default_rng(15)

#: ncd's name -> torch's function (sign: torch's gives 0 at NaN, ncd keeps the NaN)
TORCH: dict[str, Callable[[torch.Tensor], torch.Tensor]] = {
    "erf": torch.erf,
    "floor": torch.floor,
    "ceil": torch.ceil,
    "round": torch.round,
    "trunc": torch.trunc,
    "sign": lambda x: torch.where(torch.isnan(x), x, torch.sign(x)),
    "tan": torch.tan,
    "asin": torch.asin,
    "acos": torch.acos,
    "sinh": torch.sinh,
    "cosh": torch.cosh,
    "atanh": torch.atanh,
    "acosh": torch.acosh,
    "expm1": torch.expm1,
    "log1p": torch.log1p,
    "selu": F.selu,
    "mish": F.mish,
    "hardswish": F.hardswish,
    "hardsigmoid": F.hardsigmoid,
    "softsign": F.softsign,
    "logsigmoid": F.logsigmoid,
    "relu6": F.relu6,
}
#: (fn, alpha, beta) -> torch's
ACTIVATIONS: dict[tuple[str, float, float], Callable[[torch.Tensor], torch.Tensor]] = {
    ("leaky_relu", 0.01, 0.0): F.leaky_relu,
    ("leaky_relu", -0.2, 0.0): lambda x: F.leaky_relu(x, -0.2),
    ("leaky_relu", 3.0, 0.0): lambda x: F.leaky_relu(x, 3.0),
    ("elu", 1.0, 0.0): F.elu,
    ("elu", 0.3, 0.0): lambda x: F.elu(x, 0.3),
    ("celu", 0.5, 0.0): lambda x: F.celu(x, 0.5),
    ("celu", -2.0, 0.0): lambda x: F.celu(x, -2.0),
    ("softplus", 1.0, 20.0): F.softplus,
    ("softplus", 2.0, 5.0): lambda x: F.softplus(x, 2.0, 5.0),
    ("softplus", -1.5, 1.0): lambda x: F.softplus(x, -1.5, 1.0),
}


def _inputs(n: int) -> np.ndarray:
    """``[n, 7]``: normal values scaled up to 40, the edges of the piecewise functions (0, -0,
    +-3, +-1, 6), both infinities and NaN."""
    x = RNG.standard_normal((n, 7)) * RNG.choice([0.5, 3.0, 40.0], size=(n, 7))
    flat = x.reshape(-1)
    special = [0.0, -0.0, 3.0, -3.0, 1.0, -1.0, 6.0, 2.5, -2.5, np.inf, -np.inf, np.nan]
    k = min(flat.size, len(special))
    flat[:k] = special[:k]
    return x


def _torch(f: Callable[[torch.Tensor], torch.Tensor], x: np.ndarray) -> np.ndarray:
    with torch.no_grad():
        return f(torch.from_numpy(x)).numpy()


def _same(got: np.ndarray, want: np.ndarray, rtol: float, atol: float) -> None:
    """Equal NaN and infinity patterns; finite values close."""
    np.testing.assert_array_equal(np.isnan(got), np.isnan(want))
    np.testing.assert_array_equal(np.isposinf(got), np.isposinf(want))
    np.testing.assert_array_equal(np.isneginf(got), np.isneginf(want))
    fin = np.isfinite(want)
    np.testing.assert_allclose(got[fin], want[fin], rtol=rtol, atol=atol)


def _model(term: ncd.Term, n: int) -> ncd.Term:
    return term.over(ncd.Axis("r", size=n), ncd.Axis("c", size=7))


def _cases() -> list[tuple[str, ncd.Term, Callable[[torch.Tensor], torch.Tensor]]]:
    out: list[tuple[str, Any, Callable[[torch.Tensor], torch.Tensor]]] = [
        (fn, ops.unary(fn), f) for fn, f in TORCH.items()
    ]
    out += [
        (f"{fn}_{a:g}_{b:g}", ops.prim(ops.Activation(fn, a, b)), f)
        for (fn, a, b), f in ACTIVATIONS.items()
    ]
    out += [
        ("clamp", ops.clamp(-0.5, 0.75), lambda x: torch.clamp(x, -0.5, 0.75)),
        ("clamp_min", ops.clamp(min=0.25), lambda x: torch.clamp(x, min=0.25)),
        ("hardtanh", ops.hardtanh(), F.hardtanh),
    ]
    return out


CASES = _cases()
IDS = [c[0] for c in CASES]


def test_every_new_unary_fn_is_covered() -> None:
    assert set(TORCH) <= set(ops.UNARY_FNS)
    assert {fn for fn, _, _ in ACTIVATIONS} == set(ops.ACTIVATION_FNS)


@pytest.mark.parametrize("n", SIZES)
@pytest.mark.parametrize(("name", "term", "f"), CASES, ids=IDS)
def test_reference_matches_torch_with_nonfinite_inputs(
    name: str, term: ncd.Term, f: Callable[[torch.Tensor], torch.Tensor], n: int
) -> None:
    x = _inputs(n)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)  # domain errors give NaN, as torch's
        got = ncd.run(_model(term, n), x)
    _same(got, _torch(f, x), rtol=1e-12, atol=1e-13)


@pytest.mark.parametrize(("name", "term", "f"), CASES, ids=IDS)
def test_opencl_matches_the_reference_in_float32(
    name: str, term: ncd.Term, f: Callable[[torch.Tensor], torch.Tensor]
) -> None:
    pytest.importorskip("ncd_opencl")
    n = 301
    x = _inputs(n).astype(np.float32)
    model = _model(term, n)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        want = ncd.run(model, x)
    got = ncd.compile(model, target="opencl")(x)
    # float32 functions near their poles (tan, cosh of 40) carry relative error only
    _same(np.asarray(got, np.float64), np.asarray(want, np.float64), rtol=2e-6, atol=2e-6)


@pytest.mark.parametrize(("name", "term", "f"), CASES, ids=IDS)
def test_json_round_trip_keeps_the_constants(
    name: str, term: ncd.Term, f: Callable[[torch.Tensor], torch.Tensor]
) -> None:
    model = _model(term, 7)
    back = ncd.from_json(ncd.to_json(model))
    assert back.graph == model.graph
    x = _smooth_inputs(name, 7)
    np.testing.assert_array_equal(ncd.run(back, x), ncd.run(model, x))


#: inputs away from the kinks, poles and domain edges of each function (finite differences
#: need a neighbourhood where it is smooth)
def _smooth_inputs(name: str, n: int) -> np.ndarray:
    x = RNG.uniform(0.1, 0.8, size=(n, 7)) * RNG.choice([-1.0, 1.0], size=(n, 7))
    if name == "acosh":
        return 1.2 + np.abs(x)
    if name in ("hardswish", "hardsigmoid", "relu6", "clamp", "clamp_min", "hardtanh"):
        return np.where(RNG.random((n, 7)) < 0.5, x * 5 + np.sign(x) * 3.4, x)
    return x


@pytest.mark.parametrize("n", (1, 7, 13))
@pytest.mark.parametrize(("name", "term", "f"), CASES, ids=IDS)
def test_gradient_matches_torch_autograd(
    name: str, term: ncd.Term, f: Callable[[torch.Tensor], torch.Tensor], n: int
) -> None:
    x = _smooth_inputs(name, n)
    model = _model(term, n)
    seed = RNG.standard_normal((n, 7))
    grad = ncd.grad(model, wrt=[0], cotangents=True)
    dx = ncd.run(grad, x, seed)[1][0]
    xt = torch.from_numpy(x).requires_grad_(True)
    (f(xt) * torch.from_numpy(seed)).sum().backward()
    assert xt.grad is not None
    # a float32 model's constants (its masks, 1/6) are float32 values, run here on float64 data
    np.testing.assert_allclose(dx, xt.grad.numpy(), rtol=1e-7, atol=1e-9)


@pytest.mark.parametrize("fn", ["floor", "ceil", "round", "trunc", "sign"])
def test_steps_have_zero_gradient(fn: str) -> None:
    model = _model(ops.unary(fn) >> ops.mul(2.0), 7)
    dx = ncd.run(ncd.grad(model, wrt=[0], cotangents=True), _inputs(7), np.ones((7, 7)))[1][0]
    np.testing.assert_array_equal(dx, np.zeros((7, 7)))


def test_round_is_half_to_even() -> None:
    x = np.array([-2.5, -1.5, -0.5, 0.5, 1.5, 2.5, 3.5])
    model = ops.round().over(ncd.Axis("r", size=7))
    want = np.array([-2.0, -2.0, -0.0, 0.0, 2.0, 2.0, 4.0])
    np.testing.assert_array_equal(ncd.run(model, x), want)
    pytest.importorskip("ncd_opencl")
    got = ncd.compile(model, target="opencl")(x.astype(np.float32))
    np.testing.assert_array_equal(got, want)


@pytest.mark.parametrize(
    ("make", "words"),
    [
        (lambda: ops.celu(0.0), "alpha must not be 0"),
        (lambda: ops.softplus(0.0), "beta must not be 0"),
        (lambda: ops.leaky_relu(float("nan")), "alpha"),
        (lambda: ops.elu(float("inf")), "alpha"),
        (lambda: ops.softplus(1.0, float("nan")), "beta"),
        (lambda: ops.clamp(), "give min, max or both"),
        (lambda: ops.clamp(1.0, -1.0), "min 1.0 is above max -1.0"),
        (lambda: ops.prim(ops.Activation("swish", 1.0)), "fn"),
    ],
)
def test_bad_constants_are_typed_errors(make: Callable[[], Any], words: str) -> None:
    with pytest.raises(DefinitionError, match=words) as e:
        make()
    assert "Fix" in str(e.value)
