"""The shape ops of issue 15 (flip, roll, reflect/replicate/circular pads, tile,
repeat_interleave, stack) on the reference against NumPy's own at sizes 1, 7, 13 and 301, with
NaN, infinities and -0.0 moved bit for bit; their gradients (each element's cotangents summed
back to where it came from), JSON round trips and typed errors."""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
import pytest

import ncd
from ncd import ops
from ncd.errors import DefinitionError, SizeError

SIZES = (1, 7, 13, 301)
RNG = np.random.default_rng(15)


def _inputs(n: int, rows: int = 3) -> np.ndarray:
    x = RNG.standard_normal((rows, n))
    x[0, n // 2] = np.nan
    x[1, 0] = -np.inf
    x[2, n - 1] = np.inf
    x[1, n - 1] = -0.0
    return x


def _cases(n: int) -> list[tuple[str, ncd.Term, Callable[[np.ndarray], np.ndarray]]]:
    """(name, the op on axis l, NumPy's own along the last axis)."""
    cases: list[tuple[str, ncd.Term, Callable[[np.ndarray], np.ndarray]]] = [
        ("flip", ops.flip("l", l=n), lambda x: x[:, ::-1]),
        ("roll", ops.roll("l", 3, l=n), lambda x: np.roll(x, 3, axis=1)),
        ("roll_back", ops.roll("l", -2 * n - 1, l=n), lambda x: np.roll(x, -2 * n - 1, axis=1)),
        ("tile", ops.tile("l", "o", 3), lambda x: np.tile(x, (1, 3))),
        ("repeat_interleave", ops.repeat_interleave("l", "o", 2), lambda x: np.repeat(x, 2, 1)),
    ]
    for mode, numpy_mode in (("replicate", "edge"), ("circular", "wrap"), ("reflect", "reflect")):
        limit = {"reflect": n - 1, "circular": n}.get(mode, n + 2)
        for before, after in ((limit, 1), (0, limit), (min(2, limit), min(3, limit))):
            if before == after == 0 or min(before, after) < 0 or max(before, after) > limit:
                continue
            pads = ((0, 0), (before, after))
            cases.append(
                (
                    f"pad_{mode}_{before}_{after}",
                    ops.pad("l", "o", before=before, after=after, mode=mode, l=n),
                    lambda x, p=pads, m=numpy_mode: np.pad(x, p, mode=m),  # type: ignore[misc]
                )
            )
    return cases


def _model(term: ncd.Term, n: int) -> ncd.Term:
    return ncd.identity([ncd.Axis("r", size=3), ncd.Axis("l", size=n)]) >> term


def _last(model: ncd.Term, y: np.ndarray) -> np.ndarray:
    (out,) = model.codomain
    return np.moveaxis(y, [a.name for a in out.axes].index("r"), 0)


def _bits_equal(got: np.ndarray, want: np.ndarray) -> None:
    np.testing.assert_array_equal(got, want)
    np.testing.assert_array_equal(np.signbit(got), np.signbit(want))  # -0.0 stays -0.0


@pytest.mark.parametrize("n", SIZES)
def test_reference_moves_every_element_as_numpy_does(n: int) -> None:
    x = _inputs(n)
    for name, term, want in _cases(n):
        model = _model(term, n)
        got = _last(model, ncd.run(model, x))
        try:
            _bits_equal(got, want(x))
        except AssertionError as e:
            raise AssertionError(f"{name} at n = {n}") from e


@pytest.mark.parametrize("n", (1, 7, 13))
def test_gradient_sums_cotangents_back_to_their_source(n: int) -> None:
    """Each op reads ``x[idx[j]]`` at output ``j``: the gradient adds ``ct[j]`` into ``idx[j]``."""
    x = RNG.standard_normal((3, n))
    index = np.tile(np.arange(n, dtype=np.float64), (3, 1))
    for name, term, want in _cases(n):
        model = _model(term, n)
        idx = want(index).astype(np.int64)
        ct = RNG.standard_normal(idx.shape)
        (out,) = model.codomain
        seed = ct if out.axes[0].name == "r" else ct.T
        dx = ncd.run(ncd.grad(model, wrt=[0], cotangents=True), x, seed)[1][0]
        expect = np.zeros_like(x)
        for r in range(3):
            np.add.at(expect[r], idx[r], ct[r])
        np.testing.assert_allclose(dx, expect, rtol=1e-12, atol=1e-12, err_msg=f"{name} n={n}")


def test_stack_joins_its_inputs_along_a_new_axis() -> None:
    r, c = ncd.Axis("r", size=3), ncd.Axis("c", size=7)
    model = ncd.identity((r, c), (c,), (r, c)) >> ops.stack("s", 3)
    a, b, d = _inputs(7), _inputs(7)[0], -_inputs(7)
    (out,) = model.codomain
    assert [x.name for x in out.axes] == ["r", "c", "s"]
    got = ncd.run(model, a, b, d)
    want = np.stack([a, np.broadcast_to(b, a.shape), d], axis=-1)
    _bits_equal(got, want)


def test_json_round_trip() -> None:
    x = _inputs(13)
    for name, term, _ in _cases(13):
        model = _model(term, 13)
        back = ncd.from_json(ncd.to_json(model))
        assert back.graph == model.graph, name
        _bits_equal(ncd.run(back, x), ncd.run(model, x))


@pytest.mark.parametrize(
    ("make", "error", "words"),
    [
        (lambda: ops.flip("l"), SizeError, "flip needs the size of axis 'l'"),
        (lambda: ops.roll("l", 1), SizeError, "roll needs the size"),
        (lambda: ops.roll("l", 1.5, l=7), DefinitionError, "shift must be an int"),
        (lambda: ops.pad("l", "o", before=1, mode="reflect"), SizeError, "needs the size"),
        (
            lambda: ops.pad("l", "o", before=7, mode="reflect", l=7),
            SizeError,
            "at most 6",
        ),
        (lambda: ops.pad("l", "o", after=8, mode="circular", l=7), SizeError, "at most 7"),
        (lambda: ops.pad("l", "o", before=1, mode="wrap", l=7), DefinitionError, "unknown mode"),
        (
            lambda: ops.pad("l", "o", before=1, value=2.0, mode="replicate", l=7),
            DefinitionError,
            "takes its values from the input",
        ),
        (lambda: ops.pad("l", "o", before=2, mode="replicate", l=7, o=5), SizeError, "has 9"),
        (lambda: ops.tile("l", "o", 0), DefinitionError, "repeats must be an int >= 1"),
        (lambda: ops.repeat_interleave("l", "o", 2.0), DefinitionError, "repeats must be"),
        (lambda: ops.stack("s", 0), DefinitionError, "n must be an int >= 1"),
        (lambda: ops.stack(ncd.Axis("s", size=2), 3), SizeError, "declared with 2"),
    ],
)
def test_bad_arguments_are_typed_errors_with_a_fix(
    make: Callable[[], object], error: type[Exception], words: str
) -> None:
    with pytest.raises(error, match=words) as e:
        make()
    assert "Fix:" in str(e.value)
