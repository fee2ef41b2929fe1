"""Positions stay exact when a model is cast to bfloat16 or float16 (issue 15): argmax, max-pool
indices, running products, one-hot targets and the embedding gradient search positions in
float32 (``ncd.op.pinned_format``), not in the 16-bit format (exact to 256 and 2048 only)."""

from __future__ import annotations

import numpy as np
import pytest

import ncd
from ncd import ops
from ncd.op import pinned_format
from ncd.primitives.library import Binary, Cast
from ncd.testing import position_cases

FORMATS = [ncd.bfloat16, ncd.float16]
CASES = {c.name: c for c in position_cases()}


@pytest.mark.parametrize("fmt", FORMATS, ids=str)
@pytest.mark.parametrize("name", list(CASES))
def test_reference_positions_are_exact(name: str, fmt: ncd.DType) -> None:
    case = CASES[name]
    case.check(ncd.run(case.model.cast(fmt), *case.inputs_in(fmt)), fmt)


@pytest.mark.parametrize("fmt", [*FORMATS, ncd.float64], ids=str)
def test_pinned_ops_keep_float32_through_casts_and_json(fmt: ncd.DType) -> None:
    model = ops.argmax(ncd.Axis("x", size=301)).cast(ncd.float16).cast(fmt)
    pinned = [n.op for n in model.graph.nodes if n.op.pinned]
    assert pinned and {op.dtype for op in pinned} == {ncd.float32}
    # the comparisons see the model's format; the positions never do
    assert {n.op.dtype for n in model.graph.nodes if not n.op.pinned} == {fmt}
    again = ncd.from_json(ncd.to_json(model))
    assert again.graph == model.graph
    plain = ncd.from_json(ncd.to_json(ops.exp().over("x")))
    assert not any(n.op.pinned for n in plain.graph.nodes)
    assert '"pinned"' not in ncd.to_json(ops.exp().over("x"))


def test_pinned_format_scopes_only_the_ops_built_inside() -> None:
    with pinned_format("float32"):
        inside = Binary("eq")
    outside = Binary("eq")
    assert inside.pinned and inside.dtype == ncd.float32
    assert not outside.pinned and outside.dtype is None
    with pytest.raises(ncd.DTypeError, match="float format"):
        with pinned_format("int64"):
            pass
    with pytest.raises(TypeError):
        Cast(ncd.int64, pinned=1)


@pytest.mark.parametrize("fmt", FORMATS, ids=str)
def test_embedding_gradient_reaches_the_row_of_each_id(fmt: ncd.DType) -> None:
    """One-hot rows of ids past 256 against a 300-row table: each id's row gets its cotangent
    (in bfloat16 before the fix, id 257 landed on row 256)."""
    vocab, d = ncd.Axis("vocab", size=300), ncd.Axis("d", size=4)
    model = (ops.embedding(vocab, d) >> ops.reduce("sum", [d])).over("s").bind(s=3).cast(fmt)
    ids = np.array([257, 299, 3])
    train = ncd.grad(model, cotangents=True)
    _, grads = ncd.run(train, ids, np.ones(3, fmt.numpy), params=ncd.init(model, seed=0))
    (table,) = grads.values()
    rows = np.nonzero(np.asarray(table, np.float32).any(-1))[0]
    np.testing.assert_array_equal(rows, [3, 257, 299])
    np.testing.assert_array_equal(np.asarray(table, np.float32)[rows], np.ones((3, 4)))
