"""Cast models on torch: export gives a module in the model's format; the backend runs it close
to the reference (tolerance by format); float8 is refused with a typed error."""

import ml_dtypes
import numpy as np
import pytest
import torch

import ncd
from ncd import nn, ops
from ncd.testing import position_cases

TORCH = {ncd.bfloat16: torch.bfloat16, ncd.float16: torch.float16, ncd.float64: torch.float64}
SIZES = [1, 7, 13, 301]


def _x(shape, fmt, seed=0):
    return np.random.default_rng(seed).standard_normal(shape).astype(fmt.numpy)


def _close(fmt, got, want, scale):
    assert got.dtype == fmt.numpy
    tol = 8 * fmt.eps * scale
    np.testing.assert_allclose(got.astype(np.float64), want.astype(np.float64), rtol=tol, atol=tol)


@pytest.mark.parametrize("fmt", list(TORCH), ids=str)
def test_export_of_a_cast_model_is_in_that_torch_dtype(fmt):
    m = nn.transformer_block().bind(seq=7, d_model=16, heads=2, d_head=8, d_ff=32).cast(fmt)
    p = ncd.init(m, seed=0)
    module = ncd.export(m, "torch", params=p)
    assert {q.dtype for q in module.parameters()} == {TORCH[fmt]}
    assert set(dict(module.named_parameters())) == set(p)
    with torch.no_grad():
        from ncd_torch._dtypes import to_numpy, to_tensor

        out = to_numpy(module(to_tensor(_x((7, 16), fmt))))
    _close(fmt, out, ncd.run(m, _x((7, 16), fmt), params=p), scale=16.0)


@pytest.mark.parametrize("fmt", list(TORCH), ids=str)
@pytest.mark.parametrize("n", SIZES)
def test_backend_runs_cast_softmax_layernorm_linear(fmt, n):
    models = [
        ops.softmax("x").over("r"),
        ops.layernorm("x").over("r").bind(x=n),
        ops.linear("x -> e").over("r").bind(x=n, e=5),
    ]
    for base in models:
        m = base.cast(fmt)
        p = ncd.init(m, seed=n)
        x = _x((3, n), fmt, n)
        want = ncd.run(m, x, params=p)
        got = ncd.compile(m, "torch")(x, params=p)
        _close(fmt, got, want, scale=4.0 * (np.abs(want.astype(np.float64)).max() + 1.0))


def test_backend_runs_a_bf16_gpt_with_integer_ids():
    m = nn.gpt(layers=1).bind(seq=13, d_model=16, heads=2, d_head=8, d_ff=32, vocab=11)
    m = m.cast(ncd.bfloat16)
    p = ncd.init(m, seed=1)
    ids = np.arange(13) % 11
    got = ncd.compile(m, "torch")(ids, params=p)
    want = ncd.run(m, ids, params=p)
    assert got.dtype == ml_dtypes.bfloat16
    _close(ncd.bfloat16, got, want, scale=32.0)


def test_non_finite_values_pass_through_a_bf16_module():
    m = ops.cast(ncd.bfloat16) >> ops.exp().cast(ncd.bfloat16) >> ops.cast(ncd.float32)
    m = ncd.identity(ncd.ArrayType((ncd.Axis("a"),))) >> m
    x = np.array([np.inf, -np.inf, np.nan, 1.0, 100.0], np.float32)
    got = ncd.compile(m, "torch")(x)
    want = ncd.run(m, x)
    assert got.dtype == np.float32
    np.testing.assert_array_equal(got, want)  # inf, 0, NaN, e, and exp(100) overflows to inf


@pytest.mark.parametrize("fmt", [ncd.float8_e4m3, ncd.float8_e4m3fn, ncd.float8_e5m2], ids=str)
def test_float8_is_refused_by_torch_with_the_fix(fmt):
    m = ops.softmax("x").over("r").cast(fmt)
    with pytest.raises(ncd.DTypeError, match=rf"{fmt.name}.*no float8 arithmetic.*Fix: export"):
        ncd.export(m, "torch")
    with pytest.raises(ncd.DTypeError, match=fmt.name):
        ncd.compile(m, "torch")(np.zeros((2, 3), fmt.numpy))


def test_a_mixed_precision_model_keeps_each_parameter_in_its_format():
    base = nn.mlp().over("s").bind(s=7, d_model=8, d_ff=16)
    head = ops.linear("d_model -> o").bind(o=4).named("head")
    m = ncd.identity(*base.domain) >> ops.cast(ncd.bfloat16) >> base.cast(ncd.bfloat16)
    m = m >> ops.cast(ncd.float32) >> head
    p = ncd.init(m, seed=3)
    module = ncd.export(m, "torch", params=p)
    kinds = {n: q.dtype for n, q in module.named_parameters()}
    assert {d for n, d in kinds.items() if n.startswith("head")} == {torch.float32}
    assert {d for n, d in kinds.items() if not n.startswith("head")} == {torch.bfloat16}
    x = _x((7, 8), ncd.float32)
    got = ncd.compile(m, "torch")(x, params=p)
    want = ncd.run(m, x, params=p)
    assert got.dtype == np.float32
    np.testing.assert_allclose(got, want, rtol=8 * ncd.bfloat16.eps, atol=8 * ncd.bfloat16.eps)


def test_a_scalar_input_keeps_the_output_shape() -> None:
    """A 0-d array fed to the torch backend stays 0-d (np.ascontiguousarray would make it 1-d,
    and the exported broadcast then a ``(1, n)`` result): the optimiser's step scalars."""
    n = ncd.Axis("n", size=7)
    model = ncd.trace(
        lambda v, s: ncd.ops.mul()(v, s), inputs=[ncd.ArrayType((n,)), ncd.ArrayType(())]
    )
    out = ncd.compile(model, "torch")(np.arange(7.0), np.asarray(2.0))
    assert out.shape == (7,)
    np.testing.assert_array_equal(out, np.arange(7.0) * 2)


@pytest.mark.parametrize("fmt", [ncd.bfloat16, ncd.float16], ids=str)
@pytest.mark.parametrize("case", position_cases(), ids=lambda c: c.name)
def test_positions_stay_exact_in_16_bit_formats(case, fmt):
    """The exported module searches positions in float32 as the reference does (issue 15)."""
    case.check(ncd.compile(case.model.cast(fmt), "torch")(*case.inputs_in(fmt)), fmt)
