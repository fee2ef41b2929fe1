"""Integer arithmetic as torch's (issues 15, 12): sums, differences, products, maxima and
minima of integers are integers of the widest input type, exact (no float32 rounding past
2^24); a bool beside an integer counts as 0 / 1 of it; an integer beside a float, or divided,
is a float; a select of integers stays an integer; ``-ids`` and ``|ids|`` too. Every result
type is checked against torch's own promotion, and the reference against NumPy's int64."""

from __future__ import annotations

import numpy as np
import pytest

import ncd
from ncd import ops
from ncd.axis import ArrayType
from ncd.primitives.library import Binary, Scalar, Unary

torch = pytest.importorskip("torch")

R, C = ncd.Axis("r", size=3), ncd.Axis("c", size=7)
TORCH = {"int64": torch.int64, "int32": torch.int32, "bool": torch.bool, "float32": torch.float32}


def _t(dtype: str) -> ArrayType:
    return ArrayType((R, C), dtype)


@pytest.mark.parametrize("fn", ["add", "sub", "mul", "div", "max", "min", "pow", "lt"])
@pytest.mark.parametrize(
    "pair",
    [
        ("int64", "int64"),
        ("int32", "int64"),
        ("int32", "int32"),
        ("int64", "bool"),
        ("bool", "int32"),
        ("int64", "float32"),
        ("float32", "int32"),
    ],
)
def test_binary_result_types_are_torchs(fn: str, pair: tuple[str, str]) -> None:
    if fn == "sub" and "bool" in pair:
        pytest.skip("torch refuses a bool in a subtraction; ncd counts it as 0 / 1")
    a, b = (torch.ones(2, dtype=TORCH[d]) for d in pair)
    f = {
        "add": torch.add,
        "sub": torch.sub,
        "mul": torch.mul,
        "div": torch.div,
        "max": torch.maximum,
        "min": torch.minimum,
        "pow": torch.pow,
        "lt": torch.lt,
    }[fn]
    want = str(f(a, b).dtype).removeprefix("torch.")
    if fn == "pow" and "float32" not in pair:
        want = "float32"  # ncd: a power of integers is a float (torch's errs for exponents < 0)
    assert Binary(fn).out_dtypes(pair) == (want,)


@pytest.mark.parametrize("dtype", ["int64", "int32"])
@pytest.mark.parametrize(
    ("fn", "const"),
    [
        ("add", 3.0),
        ("sub", 2.0),
        ("mul", -4.0),
        ("max", 1.0),
        ("min", 0.0),
        ("mul", 0.5),
        ("div", 2.0),
        ("pow", 2.0),
        ("ge", 1.0),
    ],
)
def test_scalar_result_types_are_torchs(fn: str, const: float, dtype: str) -> None:
    x = torch.ones(2, dtype=TORCH[dtype])
    c = int(const) if const.is_integer() and fn not in ("div", "pow") else const
    f = {
        "add": torch.add,
        "sub": torch.sub,
        "mul": torch.mul,
        "div": torch.div,
        "ge": torch.ge,
        "max": lambda t, k: torch.clamp(t, min=k),
        "min": lambda t, k: torch.clamp(t, max=k),
        "pow": lambda t, k: torch.pow(t, float(k)),
    }[fn]
    want = str(f(x, c).dtype).removeprefix("torch.")
    assert Scalar(fn, const).out_dtypes((dtype,)) == (want,)


def test_unary_integers() -> None:
    assert Unary("neg").out_dtypes(("int32",)) == ("int32",)
    assert Unary("abs").out_dtypes(("int64",)) == ("int64",)
    with pytest.raises(ncd.DTypeError, match="exp"):
        (ncd.identity(_t("int64")) >> ops.exp()).graph


def test_reference_is_exact_past_float32() -> None:
    rng = np.random.default_rng(0)
    x = rng.integers(-(2**40), 2**40, (3, 7))
    y = rng.integers(-1000, 1000, (3, 7)).astype(np.int32)
    flags = rng.random((3, 7)) < 0.5
    model = (
        ncd.identity(_t("int64"), _t("int32"), _t("bool"))
        >> (ops.mul() @ ncd.identity(1))
        >> ops.add()
        >> ops.sub(7.0)
        >> ops.maximum(-(2.0**45))
        >> ops.neg()
    )
    got = ncd.run(model, x, y, flags)
    assert got.dtype == np.int64
    np.testing.assert_array_equal(got, -np.maximum(x * y + flags - 7, -(2**45)))


def test_integers_stay_integers_in_a_cast_model() -> None:
    """``term.cast(bfloat16)`` sets every op's format: integer arithmetic keeps its type."""
    model = (ncd.identity(_t("int64")) >> ops.mul(1000003.0) >> ops.add(1.0)).cast(ncd.bfloat16)
    x = np.arange(21).reshape(3, 7) * 1000003
    got = ncd.run(model, x)
    assert got.dtype == np.int64
    np.testing.assert_array_equal(got, x * 1000003 + 1)


def test_int_and_float_meet_as_the_float() -> None:
    x = np.arange(21).reshape(3, 7)
    half = ncd.run(ncd.identity(_t("int64")) >> ops.div(2.0), x)
    assert half.dtype == np.float32
    np.testing.assert_array_equal(half, (x / 2).astype(np.float32))
    model = ncd.identity(_t("int64"), (C,)) >> ops.add()
    v = np.linspace(-1, 1, 7).astype(np.float32)
    assert ncd.run(model, x, v).dtype == np.float32


def test_integer_padding_needs_a_whole_fill() -> None:
    n, o, k = ncd.Axis("l", size=9), ncd.Axis("o"), ncd.Axis("k", size=3)
    ids = ArrayType((n,), "int64")
    ok = ncd.identity(ids) >> ops.window(n, o, k, padding=1, fill=0.0)
    assert ok.graph.values[ok.graph.outputs[0]].dtype == "int64"
    with pytest.raises(ncd.DTypeError, match="whole number"):
        bad = ncd.identity(ids) >> ops.window(
            n, ncd.Axis("o2"), ncd.Axis("k2", size=3), padding=1, fill=float("-inf")
        )
        bad.graph
