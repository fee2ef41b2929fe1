"""Element formats under misuse and at the edges: every bad format, cast or mixture is an
``NcdError`` ending with a fix, raised before anything runs; rounding matches ml_dtypes exactly,
non-finite values survive, and corrupt JSON formats are ``SerializationError``s."""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

import ml_dtypes
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

import ncd
from ncd import nn, ops

(a,) = ncd.axes("a")
F32 = ncd.ArrayType((a,))


def _typed(dtype: Any = "float32") -> ncd.Term:
    return ncd.identity(ncd.ArrayType((a,), dtype))


#: (what is misused, the call); each must raise an NcdError whose message ends with a Fix.
MISUSES: list[tuple[str, Callable[[], Any]]] = [
    ("dtype of an unknown name", lambda: ncd.dtype("float13")),
    ("dtype of a number", lambda: ncd.dtype(32)),
    ("dtype of complex", lambda: ncd.dtype(np.complex64)),
    ("dtype of an ml_dtypes format ncd lacks", lambda: ncd.dtype(ml_dtypes.float8_e3m4)),
    ("dtype_bytes of an unknown name", lambda: ncd.dtype_bytes("float13")),
    ("ArrayType of an unknown format", lambda: ncd.ArrayType((a,), "int8")),
    ("cast a model to an unknown format", lambda: ops.exp().cast("half")),
    ("cast a model to an integer format", lambda: ops.exp().cast(ncd.int64)),
    ("cast a model to bool", lambda: ops.exp().cast(ncd.bool)),
    ("ops.cast to an unknown format", lambda: ops.cast("float13")),
    ("ops.cast from an integer source", lambda: ops.cast(ncd.float32, source=ncd.int64)),
    ("narrowing int cast", lambda: (_typed("int64") >> ops.cast(ncd.int32)).graph),
    (
        "bf16 and f32 into add",
        lambda: ((_typed("bfloat16") @ _typed()) >> ops.add()).graph,
    ),
    (
        "f16 and bf16 into mul",
        lambda: ((_typed("float16") @ _typed("bfloat16")) >> ops.mul()).graph,
    ),
    ("bf16 into a float32 linear", lambda: (_typed("bfloat16") >> ops.linear("a -> e")).graph),
    (
        "f32 into a bf16 linear",
        lambda: (_typed() >> ops.linear("a -> e").cast(ncd.bfloat16)).graph,
    ),
    (
        "f32 into a bf16 block",
        lambda: (ops.exp().over("s") >> nn.mlp(d_model=a).cast(ncd.float16)).graph,
    ),
    ("init to an int format", lambda: ncd.init(ops.exp(), dtype=ncd.int64)),
    ("init to a non-format", lambda: ncd.init(ops.exp(), dtype="half")),
    (
        "float32 array into a bf16 wire under safe",
        lambda: _prepare_safe(ops.softmax("x").cast(ncd.bfloat16), np.ones(3, np.float32)),
    ),
    (
        "float16 array into a bf16 wire under safe",
        lambda: _prepare_safe(ops.softmax("x").cast(ncd.bfloat16), np.ones(3, np.float16)),
    ),
    (
        "bf16 ids into an embedding",
        lambda: ncd.run(
            nn.gpt(layers=1)
            .bind(seq=2, d_model=8, heads=2, d_head=4, d_ff=8, vocab=5)
            .cast(ncd.bfloat16),
            np.zeros(2, ml_dtypes.bfloat16),
        ),
    ),
    ("a complex array into a bf16 wire", lambda: ncd.run(_typed("bfloat16"), np.ones(1, "c8"))),
]


def _prepare_safe(model: Any, x: np.ndarray) -> Any:
    from ncd.reference import prepare

    return prepare(model, [x], None, cast="safe")


@pytest.mark.parametrize(("what", "call"), MISUSES, ids=[m[0] for m in MISUSES])
def test_every_format_misuse_is_an_ncd_error_with_a_fix(what: str, call: Callable[[], Any]) -> None:
    with pytest.raises(ncd.NcdError) as e:
        call()
    msg = str(e.value)
    assert "Fix:" in msg and msg.rstrip().endswith("."), msg


def test_mixed_formats_name_the_op_where_it_was_built_both_values_and_formats() -> None:
    with pytest.raises(ncd.DTypeError) as e:
        ((_typed("bfloat16") @ _typed()) >> ops.add(name="resid")).graph
    msg = str(e.value)
    for part in ("resid", "test_core_dtypes.py:", "model input 0", "model input 1", "bfloat16"):
        assert part in msg, (part, msg)
    assert "float32" in msg and "ops.cast(ncd." in msg and ".cast(ncd." in msg


# -- rounding is ml_dtypes' rounding, exactly ---------------------------------------------------
_floats = hnp.arrays(
    np.float32,
    st.integers(1, 301),
    elements=st.floats(width=32, allow_nan=True, allow_infinity=True),
)


@settings(max_examples=60, deadline=None)
@given(
    x=_floats,
    fmt=st.sampled_from(["bfloat16", "float16", "float8_e4m3", "float8_e4m3fn", "float8_e5m2"]),
)
def test_ops_cast_rounds_exactly_as_ml_dtypes(x: np.ndarray, fmt: str) -> None:
    f = ncd.dtype(fmt)
    got = ncd.run(ncd.identity(ncd.ArrayType((ncd.Axis("n"),))) >> ops.cast(f), x)
    with np.errstate(over="ignore", invalid="ignore"):
        want = x.astype(f.numpy)
    assert got.dtype == f.numpy
    np.testing.assert_array_equal(got.astype(np.float32), want.astype(np.float32))


@settings(max_examples=40, deadline=None)
@given(x=_floats)
def test_a_bf16_round_trip_is_a_fixed_point(x: np.ndarray) -> None:
    n = ncd.Axis("n")
    there = ncd.identity(ncd.ArrayType((n,))) >> ops.cast(ncd.bfloat16) >> ops.cast(ncd.float32)
    once = ncd.run(there, x)
    twice = ncd.run(there, once)
    np.testing.assert_array_equal(once, twice)


@pytest.mark.parametrize("fmt", [ncd.bfloat16, ncd.float16, ncd.float8_e5m2], ids=str)
def test_non_finite_inputs_survive_reduced_ops(fmt: ncd.DType) -> None:
    x = np.array([np.inf, -np.inf, np.nan, 0.5], fmt.numpy)
    y = ncd.run((_typed() >> ops.relu()).cast(fmt), x).astype(np.float32)
    assert y[0] == np.inf and y[1] == 0 and np.isnan(y[2]) and y[3] == 0.5


def test_float8_e4m3_overflow_is_inf_and_e4m3fn_overflow_is_nan_as_in_ml_dtypes() -> None:
    # the OCP e4m3fn format has no infinity: ml_dtypes (and hardware) give NaN past 448
    x = np.array([448.0, 500.0, np.inf, -1e6], np.float32)
    y = ncd.run(_typed() >> ops.cast(ncd.float8_e4m3fn), x).astype(np.float32)
    assert y[0] == 448 and np.isnan(y[1:]).all()
    # the IEEE-style e4m3 tops out at 240 and overflows to inf, as bf16 and fp16 do
    z = ncd.run(_typed() >> ops.cast(ncd.float8_e4m3), x).astype(np.float32)
    assert list(z) == [np.inf, np.inf, np.inf, -np.inf]


def test_a_reduced_model_never_sees_a_wider_array_unrounded() -> None:
    # ncd.run (same_kind) rounds a float32 array onto a bf16 wire before any op reads it
    x = np.array([1.0 + 2.0**-10], np.float32)  # not a bf16 value
    y = ncd.run(_typed("bfloat16") >> ops.cast(ncd.float32), x)
    assert y[0] == 1.0


# -- JSON ---------------------------------------------------------------------------------------
def _doc(model: Any) -> dict[str, Any]:
    return json.loads(ncd.to_json(model))  # type: ignore[no-any-return]


@pytest.mark.parametrize(
    ("what", "edit"),
    [
        ("an unknown wire format", lambda d: d["types"][0].update(dtype="float13")),
        ("a wire format of the wrong type", lambda d: d["types"][0].update(dtype=16)),
        ("an op format that is no float", lambda d: d["nodes"][0]["fields"].update(dtype="int64")),
        ("an unknown op format", lambda d: d["nodes"][0]["fields"].update(dtype="half")),
        ("an op format of the wrong type", lambda d: d["nodes"][0]["fields"].update(dtype=[2])),
        ("a cast to bool", lambda d: d["nodes"][-1]["fields"].update(to="bool")),
        ("a wire format the ops do not produce", lambda d: d["types"][-1].update(dtype="float64")),
    ],
)
def test_corrupt_formats_in_json_are_serialization_errors(
    what: str, edit: Callable[[dict[str, Any]], None]
) -> None:
    m = (_typed() >> ops.exp()).cast(ncd.bfloat16) >> ops.cast(ncd.float16)
    doc = _doc(m)
    edit(doc)
    with pytest.raises(ncd.SerializationError):
        ncd.from_json(json.dumps(doc))


def test_json_without_format_fields_still_loads() -> None:
    m = nn.mlp()
    doc = _doc(m)
    assert all("dtype" not in n["fields"] for n in doc["nodes"])
    assert ncd.from_json(json.dumps(doc)) == m
