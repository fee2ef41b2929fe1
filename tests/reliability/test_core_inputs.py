"""Input checks on the host (issue 10, findings 1 and 9): ``ncd.reference.prepare`` refuses a
dtype its wire cannot take and token ids outside their table, with typed errors, before any
backend work."""

from __future__ import annotations

import numpy as np
import pytest

import ncd
from ncd import ops
from ncd.reference import INDEX_RULES, prepare


def _embed(vocab: int, seq: int) -> ncd.Term:
    return ops.embedding("vocab -> d", vocab=vocab, d=3).over(ncd.Axis("s", size=seq))


@pytest.mark.parametrize("vocab", [1, 7, 13, 301])
@pytest.mark.parametrize("bad", ["vocab", "-1", "huge"])
def test_out_of_range_ids_raise_index_range_error(vocab: int, bad: str) -> None:
    m = _embed(vocab, 7)
    value = {"vocab": vocab, "-1": -1, "huge": 10**6}[bad]
    ids = np.zeros(7, dtype=np.int64)
    ids[4] = value
    with pytest.raises(
        ncd.IndexRangeError, match=rf"\[0, {vocab}\).*vocab#.*{value} at position \(4,\)"
    ):
        ncd.run(m, ids, params=ncd.init(m))


@pytest.mark.parametrize("vocab", [1, 7, 13, 301])
def test_in_range_ids_at_the_edges_run(vocab: int) -> None:
    m = _embed(vocab, 3)
    p = ncd.init(m, seed=0)
    ids = np.array([0, vocab - 1, vocab // 2], dtype=np.int32)
    np.testing.assert_array_equal(ncd.run(m, ids, params=p), next(iter(p.values()))[ids])


def test_the_reference_rule_raises_the_same_error_on_an_arranged_graph() -> None:
    m = _embed(5, 3)
    graph, _, ps = prepare(m, [np.zeros(3, dtype=np.int64)], ncd.init(m))
    with pytest.raises(ncd.IndexRangeError, match="token ids"):
        ncd.reference.evaluate(graph, [np.array([0, 1, 5])], ps)


@pytest.mark.parametrize("ids", [np.array([0.0, 1.0, 2.0]), np.array([0.5, 1, 2], np.float32)])
def test_float_ids_are_refused_not_truncated(ids: np.ndarray) -> None:
    m = _embed(5, 3)
    for cast in ("same_kind", "unsafe"):
        with pytest.raises(ncd.DTypeError, match="truncated"):
            prepare(m, [ids], ncd.init(m), cast=cast)  # type: ignore[arg-type]


@pytest.mark.parametrize(
    "x",
    [
        np.ones((2, 7), np.complex64),
        np.array([[object()] * 7] * 2, dtype=object),
        np.full((2, 7), "a"),
        np.zeros((2, 7), dtype="V4"),
    ],
)
def test_complex_object_string_void_refused_whatever_cast(x: np.ndarray) -> None:
    m = ops.unary("exp").over(ncd.Axis("b", size=2), ncd.Axis("d", size=7))
    for cast in ("same_kind", "unsafe"):
        with pytest.raises(ncd.DTypeError, match="wire is float32"):
            prepare(m, [x], {}, cast=cast)  # type: ignore[arg-type]


def test_float64_passes_same_kind_but_not_safe() -> None:
    m = ops.linear("d -> e", d=7, e=13)
    p = ncd.init(m)
    x = np.ones(7)
    prepare(m, [x], p)
    with pytest.raises(ncd.DTypeError, match=r"float64.*'safe'"):
        prepare(m, [x], p, cast="safe")
    with pytest.raises(ncd.DTypeError, match=r"parameter linear\.weight"):
        prepare(m, [x.astype(np.float32)], {k: v.astype(np.complex64) for k, v in p.items()})


def test_ragged_input_is_a_dtype_error() -> None:
    m = ops.unary("exp").over(ncd.Axis("d", size=2))
    with pytest.raises(ncd.DTypeError, match="rectangular"):
        prepare(m, [[[1.0, 2.0], [3.0]]], {})


def test_non_finite_float_inputs_are_not_refused() -> None:
    m = ops.unary("exp").over(ncd.Axis("d", size=3))
    y = ncd.run(m, np.array([np.inf, -np.inf, np.nan], np.float32))
    assert y[0] == np.inf and y[1] == 0.0 and np.isnan(y[2])


def test_index_rules_are_a_table_keyed_by_op_class() -> None:
    assert ops.Embedding in INDEX_RULES


@pytest.mark.torch
def test_torch_runs_float64_in_float64_and_refuses_complex() -> None:
    pytest.importorskip("ncd_torch")
    m = ops.linear("d -> e", d=7, e=13).over(ncd.Axis("b", size=3))
    p = {k: v.astype(np.float64) for k, v in ncd.init(m, seed=0).items()}
    x = np.random.default_rng(0).standard_normal((3, 7))
    exe = ncd.compile(m, "torch")
    got = exe(x, params=p)
    assert got.dtype == np.float64
    np.testing.assert_allclose(got, ncd.run(m, x, params=p), rtol=1e-12, atol=1e-12)
    with pytest.raises(ncd.DTypeError, match="complex"):
        exe(x.astype(np.complex128), params=p)


@pytest.mark.torch
@pytest.mark.parametrize("bad", [5, -1])
def test_torch_embedding_ids_out_of_range_raise_before_running(bad: int) -> None:
    pytest.importorskip("ncd_torch")
    m = _embed(5, 3)
    with pytest.raises(ncd.IndexRangeError, match=r"\[0, 5\)"):
        ncd.compile(m, "torch")(np.array([0, bad, 1]), params=ncd.init(m))


def _opencl() -> None:
    pytest.importorskip("ncd_opencl")
    from ncd.plugins import registry

    if "opencl" not in registry().backends:
        pytest.skip("no opencl backend")


@pytest.mark.opencl
@pytest.mark.parametrize("bad", [13, -1, 10**6])
def test_opencl_checks_ids_on_the_host(bad: int) -> None:
    _opencl()
    m = _embed(13, 7)
    ids = np.arange(7) % 13
    exe = ncd.compile(m, "opencl")
    p = ncd.init(m)
    np.testing.assert_allclose(exe(ids, params=p), ncd.run(m, ids, params=p), rtol=1e-6)
    ids[6] = bad
    with pytest.raises(ncd.IndexRangeError, match=rf"{bad} at position \(6,\)"):
        exe(ids, params=p)
    with pytest.raises(ncd.DTypeError, match="truncated"):
        exe(ids.astype(np.float32), params=p)


@pytest.mark.opencl
def test_opencl_refuses_float64_it_was_not_built_for() -> None:
    _opencl()
    m = ops.softmax(ncd.Axis("d", size=7)).over(ncd.Axis("b", size=3))
    with pytest.raises(ncd.DTypeError, match="float64"):
        ncd.compile(m, "opencl")(np.zeros((3, 7)))


@pytest.mark.parametrize("dtype", [np.int64, np.int32, np.bool_, np.float16])
def test_narrow_inputs_run_in_the_wires_float32(dtype: type) -> None:
    m = ops.unary("exp").over(ncd.Axis("d", size=13))
    x = (np.arange(13) % 2).astype(dtype)
    y = ncd.run(m, x)
    assert y.dtype == np.float32
    np.testing.assert_allclose(y, np.exp(x.astype(np.float32)), rtol=1e-6)
    assert ncd.run(m, np.ones(13)).dtype == np.float64  # a wider float runs as given
