"""``ncd.scan`` (issue 15): a cell repeated along an axis against a NumPy loop at awkward
lengths with non-finite inputs, forward and reverse, term and function cells, several states
and outputs, its gradient, JSON, and the typed errors of a bad scan."""

from __future__ import annotations

import numpy as np
import pytest

import ncd
from ncd import ops
from ncd.errors import AlignmentError, DefinitionError, SizeError, TraceError

RNG = np.random.default_rng(15)
D = ncd.Axis("d", size=3)
B = ncd.Axis("b", size=2)


def _seq(n: int) -> ncd.Axis:
    return ncd.Axis("t", size=n)


def _xs(n: int, finite: bool = True) -> np.ndarray:
    x = RNG.standard_normal((n, 2, 3))
    if not finite:
        x[n // 2, 0, 1] = np.nan
        x[0, 1, 2] = np.inf
        x[-1, 1, 0] = -np.inf
    return x


@pytest.mark.parametrize("n", (1, 7, 13, 301))
@pytest.mark.parametrize("reverse", (False, True))
def test_a_term_cell_is_a_running_sum(n: int, reverse: bool) -> None:
    t = _seq(n)
    run = ncd.scan(ops.add() >> ncd.copy(2), over=t, reverse=reverse)

    @ncd.trace(inputs=[ncd.ArrayType((B, D)), ncd.ArrayType((t, B, D))])
    def model(h: ncd.Tensor, x: ncd.Tensor) -> tuple[ncd.Tensor, ncd.Tensor]:
        return run(h, x)  # type: ignore[no-any-return]

    h0, x = RNG.standard_normal((2, 3)), _xs(n, finite=n > 2)
    last, ys = ncd.run(model, h0, x)
    walk = x[::-1] if reverse else x
    want = h0 + np.cumsum(walk, axis=0)
    want = want[::-1] if reverse else want
    np.testing.assert_allclose(ys, want, rtol=1e-12)
    np.testing.assert_allclose(last, h0 + walk.sum(axis=0), rtol=1e-12)
    assert [a.name for a in model.codomain[1].axes] == ["t", "b", "d"]


@pytest.mark.parametrize("n", (1, 7, 13))
def test_a_function_cell_closes_over_weights_read_once(n: int) -> None:
    """An Elman cell whose matrix and bias are learned once outside the loop, as nn.rnn's."""
    t, k = _seq(n), ncd.Axis("k", size=3)

    @ncd.trace(inputs=[ncd.ArrayType((t, B, D))])
    def model(x: ncd.Tensor) -> ncd.Tensor:
        w = ops.learned((D, k), name="w")()
        bias = ops.learned((D,), init="zeros", name="bias")()

        def cell(h: ncd.Tensor, xt: ncd.Tensor) -> tuple[ncd.Tensor, ncd.Tensor]:
            mixed = ops.einsum("d k, k -> d", d=D, k=k)(w, ops.rename(D, k)(h))
            new = ops.unary("tanh")(xt + mixed + bias)
            return new, new * 2.0

        zero = ops.constant(0.0, [B, D])()
        _, ys = ncd.scan(cell, over=t)(zero, x)
        return ys  # type: ignore[no-any-return]

    params = ncd.init(model, seed=1, dtype=np.float64)
    assert sorted(params) == ["bias.weight", "w.weight"]  # one copy, whatever the length
    x = _xs(n, finite=n > 2)
    got = ncd.run(model, x, params=params)
    h, want = np.zeros((2, 3)), []
    for step in range(n):
        h = np.tanh(x[step] + h @ params["w.weight"].T + params["bias.weight"])
        want.append(2.0 * h)
    np.testing.assert_allclose(got, np.stack(want), rtol=1e-12, atol=1e-15)


def test_several_states_and_outputs_and_no_state() -> None:
    t = _seq(7)

    def cell(s: ncd.Tensor, q: ncd.Tensor, a: ncd.Tensor, b: ncd.Tensor) -> tuple[ncd.Tensor, ...]:
        return s + a, q * b, s - q, a * b

    @ncd.trace(inputs=[ncd.ArrayType((t, D)), ncd.ArrayType((t, D))])
    def model(a: ncd.Tensor, b: ncd.Tensor) -> tuple[ncd.Tensor, ...]:
        zero, one = ops.constant(0.0, [D])(), ops.constant(1.0, [D])()
        s, q, diff, prod = ncd.scan(cell, over=t, states=2, outputs=2)(zero, one, a, b)
        (mapped,) = (ncd.scan(ops.mul(), over=t, states=0)(a, b),)
        return s, q, diff, prod, mapped

    a, b = RNG.standard_normal((7, 3)), RNG.uniform(0.5, 1.5, (7, 3))
    s, q, diff, prod, mapped = ncd.run(model, a, b)
    run_s = np.concatenate([np.zeros((1, 3)), np.cumsum(a, 0)])
    run_q = np.concatenate([np.ones((1, 3)), np.cumprod(b, 0)])
    np.testing.assert_allclose(s, run_s[-1], rtol=1e-12)
    np.testing.assert_allclose(q, run_q[-1], rtol=1e-12)
    np.testing.assert_allclose(diff, run_s[:-1] - run_q[:-1], rtol=1e-12, atol=1e-15)
    np.testing.assert_allclose(prod, a * b, rtol=1e-12)
    np.testing.assert_allclose(mapped, a * b, rtol=1e-12)


def test_gradient_flows_back_through_every_step() -> None:
    """d/dx of sum(cumprod-like scan) matches central differences."""
    t = _seq(5)
    run = ncd.scan(lambda h, x: (h * x + x, ops.unary("sin")(h)), over=t)

    @ncd.trace(inputs=[ncd.ArrayType((t, D))])
    def model(x: ncd.Tensor) -> ncd.Tensor:
        h, ys = run(ops.constant(0.5, [D])(), x)
        return ops.sum([t, D])(ys) + ops.sum(D)(h)  # type: ignore[no-any-return]

    x = RNG.uniform(-1, 1, (5, 3))
    _, grads = ncd.run(ncd.grad(model, wrt=[0]), x)
    dx = grads[0]
    eps, want = 1e-6, np.zeros_like(x)
    for i in np.ndindex(x.shape):
        up, down = x.copy(), x.copy()
        up[i] += eps
        down[i] -= eps
        want[i] = (ncd.run(model, up) - ncd.run(model, down)) / (2 * eps)
    np.testing.assert_allclose(dx, want, rtol=1e-6, atol=1e-8)


def test_json_round_trip_runs_the_same() -> None:
    t = _seq(13)

    @ncd.trace(inputs=[ncd.ArrayType((B, D)), ncd.ArrayType((t, B, D))])
    def model(h: ncd.Tensor, x: ncd.Tensor) -> tuple[ncd.Tensor, ncd.Tensor]:
        return ncd.scan(ops.maximum() >> ncd.copy(2), over=t)(h, x)  # type: ignore[no-any-return]

    back = ncd.from_json(ncd.to_json(model))
    assert back.graph == model.graph
    h, x = RNG.standard_normal((2, 3)), _xs(13, finite=False)
    for got, want in zip(ncd.run(back, h, x), ncd.run(model, h, x), strict=True):
        np.testing.assert_array_equal(got, want)


def _typed(t: ncd.Axis, cell: object, **kw: object) -> ncd.Term:
    @ncd.trace(inputs=[ncd.ArrayType((D,)), ncd.ArrayType((t, D))])
    def model(h: ncd.Tensor, x: ncd.Tensor) -> ncd.Tensor:
        out = ncd.scan(cell, over=t, **kw)(h, x)  # type: ignore[arg-type]
        return out[-1]  # type: ignore[no-any-return]

    return model


def test_a_cell_that_changes_the_states_axes_is_refused_naming_them() -> None:
    moved = ops.rename(D, ncd.Axis("e", size=3))
    with pytest.raises(AlignmentError, match=r"changes the axes of state 0 at step 0: .*\[d"):
        _typed(_seq(7), lambda h, x: (moved(h + x), x))


def test_a_cell_holding_parameters_is_refused_with_the_fix() -> None:
    cell = ops.linear(D, D, name="mix") >> ncd.copy(2)
    with pytest.raises(DefinitionError, match=r"holds learned parameters \(mix_2\.weight"):
        _typed(_seq(7), ops.add() >> cell)


@pytest.mark.parametrize(
    ("make", "error", "words"),
    [
        (lambda: _typed(ncd.Axis("t"), ops.add() >> ncd.copy(2)), SizeError, "needs that size"),
        (lambda: _typed(_seq(3), ops.add() >> ncd.copy(2), states=-1), DefinitionError, ">= 0"),
        (lambda: _typed(_seq(3), ops.add(), outputs=2), DefinitionError, "outputs=2"),
        (lambda: _typed(_seq(3), lambda h, x: h + x), DefinitionError, "returned 1 values"),
        (lambda: _typed(_seq(3), lambda *a: a), DefinitionError, "takes \\*args"),
        (lambda: _typed(_seq(3), 3), DefinitionError, "a term or a function"),
        (lambda: _typed(_seq(3), lambda h, x: (h, 3)), TraceError, "tensors of the enclosing"),
        (lambda: ncd.scan(ops.unary("exp"), over="t"), DefinitionError, "reads no sequence"),
        (lambda: ncd.scan(ops.add(), over=3), DefinitionError, "over must be an axis"),
    ],
)
def test_bad_scans_are_typed_errors_with_a_fix(make: object, error: type, words: str) -> None:
    with pytest.raises(error, match=words) as info:
        make()  # type: ignore[operator]
    assert "Fix" in str(info.value) or error in (DefinitionError, TraceError)


def test_a_sequence_without_the_axis_is_refused() -> None:
    with pytest.raises(AlignmentError, match="has no axis 't' to scan over"):

        @ncd.trace(inputs=[ncd.ArrayType((D,)), ncd.ArrayType((B, D))])
        def model(h: ncd.Tensor, x: ncd.Tensor) -> ncd.Tensor:
            return ncd.scan(ops.add() >> ncd.copy(2), over="t")(h, x)[1]  # type: ignore[no-any-return]
