"""Element formats as values (ncd.dtypes), ``term.cast``, ``ops.cast`` and the reference
interpreter as the ground truth for reduced precision."""

import copy
import pickle

import ml_dtypes
import numpy as np
import pytest

import ncd
from ncd import nn, ops

FLOATS = [
    ncd.float64,
    ncd.float32,
    ncd.float16,
    ncd.bfloat16,
    ncd.float8_e4m3,
    ncd.float8_e4m3fn,
    ncd.float8_e5m2,
]
REDUCED = [ncd.float16, ncd.bfloat16]
SIZES = [1, 7, 13, 301]

#: format -> (itemsize, numpy dtype, kind, accumulate)
TABLE = {
    ncd.float64: (8, np.dtype(np.float64), "float", ncd.float64),
    ncd.float32: (4, np.dtype(np.float32), "float", ncd.float32),
    ncd.float16: (2, np.dtype(np.float16), "float", ncd.float32),
    ncd.bfloat16: (2, np.dtype(ml_dtypes.bfloat16), "float", ncd.float32),
    ncd.float8_e4m3: (1, np.dtype(ml_dtypes.float8_e4m3), "float", ncd.float32),
    ncd.float8_e4m3fn: (1, np.dtype(ml_dtypes.float8_e4m3fn), "float", ncd.float32),
    ncd.float8_e5m2: (1, np.dtype(ml_dtypes.float8_e5m2), "float", ncd.float32),
    ncd.int32: (4, np.dtype(np.int32), "int", ncd.int64),
    ncd.int64: (8, np.dtype(np.int64), "int", ncd.int64),
    ncd.bool: (1, np.dtype(np.bool_), "bool", ncd.int64),
}


# -- the values --------------------------------------------------------------------------------
def test_acceptance_line():
    assert ncd.bfloat16.itemsize == 2 and ncd.bfloat16.accumulate == ncd.float32


@pytest.mark.parametrize("fmt", list(TABLE), ids=str)
def test_each_format_has_its_attributes(fmt):
    itemsize, numpy, kind, acc = TABLE[fmt]
    assert (fmt.itemsize, fmt.numpy, fmt.kind, fmt.accumulate) == (itemsize, numpy, kind, acc)
    assert fmt.accumulate is acc
    assert repr(fmt) == f"ncd.{fmt.name}" and str(fmt) == fmt.name and fmt == fmt.name
    assert ncd.dtype(fmt.name) is fmt and ncd.dtype(fmt) is fmt and ncd.dtype(fmt.numpy) is fmt
    assert ncd.dtype(fmt.numpy.type) is fmt
    # NumPy reads a format as the string it is: that string names the same NumPy dtype
    assert np.dtype(fmt) == fmt.numpy and np.zeros(2, fmt).dtype == fmt.numpy
    assert ncd.dtype_bytes(fmt) == itemsize and ncd.DTYPES[fmt.name] == itemsize


def test_conversions_from_numpy_ml_dtypes_and_names():
    assert ncd.dtype("bfloat16") is ncd.bfloat16
    assert ncd.dtype(np.float16) is ncd.float16
    assert ncd.dtype(np.dtype("float32")) is ncd.float32
    assert ncd.dtype(ml_dtypes.bfloat16) is ncd.bfloat16
    assert ncd.dtype(ml_dtypes.float8_e5m2) is ncd.float8_e5m2
    assert ncd.dtype("float8") is ncd.float8_e4m3  # the cost model's old name
    assert ncd.dtype(bool) is ncd.bool and ncd.dtype(np.int64) is ncd.int64


def test_import_ncd_leaves_ml_dtypes_until_a_reduced_format_needs_it():
    import subprocess
    import sys

    code = (
        "import sys, numpy as np, ncd\n"
        "from ncd import ops\n"
        "ncd.run(ops.softmax('x'), np.ones(3)); ncd.bfloat16.itemsize\n"
        "assert 'ml_dtypes' not in sys.modules\n"
        "assert ncd.bfloat16.numpy.name == 'bfloat16' and 'ml_dtypes' in sys.modules\n"
    )
    subprocess.run([sys.executable, "-c", code], check=True)


def test_formats_are_interned_and_frozen():
    assert copy.copy(ncd.bfloat16) is ncd.bfloat16
    assert copy.deepcopy(ncd.bfloat16) is ncd.bfloat16
    assert pickle.loads(pickle.dumps(ncd.bfloat16)) is ncd.bfloat16
    with pytest.raises(AttributeError, match="frozen"):
        ncd.bfloat16.itemsize = 4
    with pytest.raises(AttributeError, match="frozen"):
        del ncd.bfloat16.kind
    with pytest.raises(ncd.DTypeError, match="exists already"):
        ncd.DType("bfloat16", np.float32, 4, "float", "float32")
    assert {ncd.float32: 1}["float32"] == 1 and hash(ncd.float32) == hash("float32")


@pytest.mark.parametrize(
    "bad", ["float13", "complex64", np.complex64, ml_dtypes.float8_e3m4, 3, None, object()]
)
def test_unknown_format_is_a_typed_error_listing_the_formats(bad):
    with pytest.raises(ncd.UnknownDTypeError, match="Fix: use one of float64, float32") as e:
        ncd.dtype(bad)
    assert isinstance(e.value, ncd.DTypeError) and isinstance(e.value, ncd.DefinitionError)
    with pytest.raises(ncd.DefinitionError, match="unknown element format"):
        ncd.ArrayType((ncd.Axis("a"),), bad)
    with pytest.raises(ncd.DTypeError, match="unknown element format"):
        ops.exp().cast(bad)


def test_array_types_carry_interned_formats():
    (a,) = ncd.axes("a")
    t = ncd.ArrayType((a,), "bfloat16")
    assert t.dtype is ncd.bfloat16 and str(t) == "[a]:bfloat16" and t.is_float
    assert ncd.ArrayType((a,), np.int64).dtype is ncd.int64
    assert ncd.ArrayType((a,)).dtype is ncd.float32


# -- cast on terms -----------------------------------------------------------------------------
def _rows(shape, fmt, seed=0):
    return np.random.default_rng(seed).standard_normal(shape).astype(fmt.numpy)


def test_acceptance_softmax_in_bfloat16():
    sm = ops.softmax("x").over("r").cast(ncd.bfloat16)
    X = np.random.default_rng(0).standard_normal((37, 301)).astype(ml_dtypes.bfloat16)
    out = ncd.run(sm, X)
    assert out.dtype == ml_dtypes.bfloat16 and out.shape == (37, 301)
    want = ncd.run(ops.softmax("x").over("r"), X.astype(np.float64))
    np.testing.assert_allclose(out.astype(np.float64), want, rtol=ncd.bfloat16.eps, atol=1e-6)


def _close(fmt, got, want, scale=1.0):
    """Within a few roundings of the format (a float64 computation is the truth)."""
    tol = 8 * fmt.eps * scale
    np.testing.assert_allclose(np.asarray(got, np.float64), want, rtol=tol, atol=tol)


@pytest.mark.parametrize("fmt", [*REDUCED, ncd.float64], ids=str)
@pytest.mark.parametrize("n", SIZES)
def test_softmax_and_layernorm_in_each_format(fmt, n):
    for base in (ops.softmax("x").over("r"), ops.layernorm("x", affine=False).over("r")):
        m = base.cast(fmt)
        x = _rows((3, n), fmt, n)
        got = ncd.run(m, x)
        assert got.dtype == fmt.numpy
        want = ncd.run(base, x.astype(np.float64))
        _close(fmt, got, want, scale=4.0)


@pytest.mark.parametrize("fmt", [*REDUCED, ncd.float64], ids=str)
@pytest.mark.parametrize("n", SIZES)
def test_linear_in_each_format_accumulates_in_float32(fmt, n):
    base = ops.linear("d -> e").over("s").bind(d=n, e=5)
    m = base.cast(fmt)
    p = ncd.init(m, seed=n)
    assert all(v.dtype == fmt.numpy for v in p.values())
    x = _rows((4, n), fmt, n)
    got = ncd.run(m, x, params=p)
    assert got.dtype == fmt.numpy
    want = ncd.run(
        base, x.astype(np.float64), params={k: v.astype(np.float64) for k, v in p.items()}
    )
    # one rounding of each output (the sum runs in float32 or float64)
    _close(fmt, got, want, scale=np.abs(want).max() + 1.0)


@pytest.mark.parametrize("fmt", [*REDUCED, ncd.float64], ids=str)
def test_transformer_block_in_each_format(fmt):
    base = nn.transformer_block().bind(seq=7, d_model=16, heads=2, d_head=8, d_ff=32)
    m = base.cast(fmt)
    p = ncd.init(m, seed=0)
    assert {v.dtype for v in p.values()} == {fmt.numpy}
    x = _rows((7, 16), fmt)
    got = ncd.run(m, x, params=p)
    assert got.dtype == fmt.numpy
    want = ncd.run(
        base, x.astype(np.float64), params={k: v.astype(np.float64) for k, v in p.items()}
    )
    # many roundings in a row: a looser bound, still far below the values' own size
    _close(fmt, got, want, scale=16.0 if fmt.reduced else 1.0)


def test_cast_keeps_names_scopes_and_parameter_names():
    base = nn.gpt(layers=2).bind(seq=5, d_model=16, heads=2, d_head=8, d_ff=32, vocab=11)
    m = base.cast(ncd.bfloat16)
    assert list(ncd.init(m)) == list(ncd.init(base))
    assert [n.path for n in m.graph.nodes] == [n.path for n in base.graph.nodes]
    assert [s.name for s in m.graph.scopes] == [s.name for s in base.graph.scopes]
    # token ids stay integers; every float wire is bf16
    (ids,) = m.domain
    assert ids.dtype is ncd.int64
    assert {t.dtype for t in m.graph.values if t.is_float} == {ncd.bfloat16}
    out = ncd.run(m, np.arange(5) % 11, params=ncd.init(m))
    assert out.dtype == ml_dtypes.bfloat16 and np.isfinite(out.astype(np.float32)).all()


def test_cast_composes_with_over_bind_and_named():
    m = ops.softmax("x").cast(ncd.float16).over("r").named("sm").bind(x=7)
    x = _rows((3, 7), ncd.float16)
    assert ncd.run(m, x).dtype == np.float16
    a = ops.exp().over("r").bind().cast("bfloat16") >> ops.cast(ncd.float32)
    (t,) = a.codomain
    assert t.dtype is ncd.float32
    # a cast twice: the last format wins; explicit float casts follow the whole model
    twice = (ops.exp() >> ops.cast(ncd.float32)).cast(ncd.bfloat16).cast(ncd.float16)
    assert {t.dtype for t in twice.graph.values} == {ncd.float16}


def test_explain_shows_formats_other_than_float32():
    m = ops.softmax("x").over("r").cast(ncd.bfloat16) >> ops.cast(ncd.float32)
    text = m.explain()
    assert "softmax: [x -> x] over (r) :bfloat16" in text
    assert "cast float32: [() -> ()] over (r x) :bfloat16 -> float32" in text
    assert ":" not in nn.mlp().explain().split("\n", 1)[1].replace(": [", "")


# -- ops.cast ----------------------------------------------------------------------------------
@pytest.mark.parametrize("n", SIZES)
def test_ops_cast_rounds_to_nearest_even_like_ml_dtypes(n):
    x = np.random.default_rng(n).standard_normal((n,)).astype(np.float32) * 1e3
    x[0] = np.float32(3.4e38) if n > 1 else x[0]  # finite in float32, past bf16's largest
    for fmt in FLOATS:
        m = ncd.identity(ncd.ArrayType((ncd.Axis("x"),))) >> ops.cast(fmt)
        with np.errstate(over="ignore"):
            want = x.astype(fmt.numpy)
        got = ncd.run(m, x)
        assert got.dtype == fmt.numpy
        np.testing.assert_array_equal(got.astype(np.float64), want.astype(np.float64))


def test_non_finite_values_survive_casts_and_overflow_is_inf():
    (a,) = ncd.axes("a")
    x = np.array([np.inf, -np.inf, np.nan, 3.4e38, 1.0], np.float32)
    to_bf = ncd.identity(ncd.ArrayType((a,))) >> ops.cast(ncd.bfloat16)
    y = ncd.run(to_bf, x)
    assert y.dtype == ml_dtypes.bfloat16
    f = y.astype(np.float32)
    assert f[0] == np.inf and f[1] == -np.inf and np.isnan(f[2]) and f[3] == np.inf and f[4] == 1
    to_f16 = ncd.identity(ncd.ArrayType((a,))) >> ops.cast(ncd.float16)
    h = ncd.run(to_f16, x).astype(np.float32)
    assert h[0] == np.inf and np.isnan(h[2]) and h[3] == np.inf  # overflow: inf
    back = ncd.run(ncd.identity(ncd.ArrayType((a,), "bfloat16")) >> ops.cast(ncd.float32), y)
    assert back.dtype == np.float32 and np.isnan(back[2]) and back[0] == np.inf
    # a bf16 softmax over a row holding inf gives NaN, as float32 does
    sm = ops.softmax("x").cast(ncd.bfloat16)
    row = np.array([0.0, np.inf, 1.0], ml_dtypes.bfloat16)
    assert np.isnan(ncd.run(sm, row).astype(np.float32)).all()


def test_int_to_float_and_widening_int_casts():
    (s,) = ncd.axes("s")
    ids = np.array([0, 3, -7, 2**24 + 1], np.int64)
    m = ncd.identity(ncd.ArrayType((s,), "int64")) >> ops.cast(ncd.float32)
    np.testing.assert_array_equal(ncd.run(m, ids), ids.astype(np.float32))
    w = ncd.identity(ncd.ArrayType((s,), "int32")) >> ops.cast(ncd.int64)
    got = ncd.run(w, ids[:3].astype(np.int32))
    assert got.dtype == np.int64 and list(got) == [0, 3, -7]


def test_float_to_int_truncates_and_saturates_and_bool_is_nonzero():
    (s,) = ncd.axes("s")
    x = np.array([2.9, -2.9, 0.5, -0.0, np.nan, np.inf, -np.inf, 3e19, -3e19, 7.0], np.float32)
    to64 = ncd.run(ncd.identity(ncd.ArrayType((s,))) >> ops.cast(ncd.int64), x)
    big, small = np.iinfo(np.int64).max, np.iinfo(np.int64).min
    assert to64.dtype == np.int64
    assert list(to64) == [2, -2, 0, 0, 0, big, small, big, small, 7]
    to32 = ncd.run(ncd.identity(ncd.ArrayType((s,))) >> ops.cast(ncd.int32), x)
    assert to32.dtype == np.int32 and list(to32[[0, 5, 7, 8]]) == [
        2,
        2**31 - 1,
        2**31 - 1,
        -(2**31),
    ]
    as_bool = ncd.run(ncd.identity(ncd.ArrayType((s,))) >> ops.cast(ncd.bool), x)
    assert as_bool.dtype == np.bool_ and list(as_bool) == [True] * 3 + [False] + [True] * 6


def test_narrowing_int_casts_are_refused():
    (s,) = ncd.axes("s")
    with pytest.raises(ncd.DTypeError, match="narrower than int64"):
        (ncd.identity(ncd.ArrayType((s,), "int64")) >> ops.cast(ncd.int32)).graph
    with pytest.raises(ncd.DTypeError, match="must be a float format"):
        ops.exp().cast(ncd.int32)


def test_comparisons_and_logic_give_bool_wires_that_count_as_zero_or_one():
    (s,) = ncd.axes("s")
    a = np.array([1.0, np.nan, -2.0, 0.0, 3.0], np.float32)
    b = np.array([1.0, 1.0, 5.0, 0.0, np.nan], np.float32)
    pair = [ncd.ArrayType((s,)), ncd.ArrayType((s,))]
    for fn, want in (("lt", np.less), ("ge", np.greater_equal), ("ne", np.not_equal)):
        m = ncd.identity(*pair) >> getattr(ops, fn)()
        assert m.graph.values[m.graph.outputs[0]].dtype == ncd.bool
        got = ncd.run(m, a, b)
        assert got.dtype == np.bool_ and list(got) == list(want(a, b))
    for fn in ("logical_and", "logical_or", "logical_xor"):
        got = ncd.run(ncd.identity(*pair) >> getattr(ops, fn)(), a, b)
        assert got.dtype == np.bool_ and list(got) == list(getattr(np, fn)(a, b)), fn
    nots = ncd.run(ncd.identity(ncd.ArrayType((s,))) >> ops.logical_not(), a)
    assert list(nots) == [False, False, False, True, False]
    # a bool in arithmetic is 0.0 / 1.0 (torch's promotion), in the other input's format
    masked = ncd.identity(*pair) >> (ops.gt(0.5) @ ncd.identity(1)) >> ops.mul()
    y = ncd.run(masked, a, b)
    assert masked.graph.values[masked.graph.outputs[0]].dtype == ncd.float32
    np.testing.assert_array_equal(y, (a > 0.5).astype(np.float32) * b)


# -- formats meet only at a cast ---------------------------------------------------------------
def test_mixing_formats_at_a_binary_op_names_both_values_and_the_fix():
    (a,) = ncd.axes("a")
    half = (ncd.identity(ncd.ArrayType((a,))) >> ops.exp(name="halfexp")).cast(ncd.bfloat16)
    full = ncd.identity(ncd.ArrayType((a,))) >> ops.exp(name="fullexp")
    with pytest.raises(ncd.DTypeError) as e:
        ((half @ full) >> ops.add()).graph
    msg = str(e.value)
    for part in (
        "add",
        "mixes formats",
        "halfexp",
        "fullexp",
        "bfloat16",
        "float32",
        "test_dtypes.py:",
        "Fix: convert the value with ops.cast(ncd.bfloat16)",
    ):
        assert part in msg, (part, msg)


def test_a_bf16_value_into_a_float32_linear_is_refused():
    with pytest.raises(ncd.DTypeError, match=r"linear.*its parameters are float32.*bfloat16"):
        (ops.softmax("d").cast(ncd.bfloat16) >> ops.linear("d -> e")).graph
    ok = ops.softmax("d").cast(ncd.bfloat16) >> ops.cast(ncd.float32) >> ops.linear("d -> e")
    assert ok.codomain[0].dtype is ncd.float32


# -- JSON and init -----------------------------------------------------------------------------
def test_json_keeps_formats():
    m = (nn.mlp().over("s").bind(s=3, d_model=8, d_ff=16).cast(ncd.bfloat16)) >> ops.cast(
        ncd.float32
    )
    text = ncd.to_json(m)
    back = ncd.from_json(text)
    assert back == m and ncd.to_json(back) == text
    assert [t.dtype for t in back.graph.values] == [t.dtype for t in m.graph.values]
    assert all(t.dtype is ncd.dtype(t.dtype.name) for t in back.graph.values)
    # an uncast model's JSON has no format fields (as before formats existed)
    assert '"dtype": null' not in ncd.to_json(nn.mlp())


def test_loading_an_unknown_format_is_a_serialization_error():
    m = nn.mlp().cast(ncd.bfloat16)
    for bad in (
        ncd.to_json(m).replace('"bfloat16"', '"bfloat13"'),
        ncd.to_json(ops.softmax("x") >> ops.cast(ncd.float16)).replace('"float16"', '"int8"'),
    ):
        with pytest.raises(ncd.SerializationError, match="unknown element format"):
            ncd.from_json(bad)


def test_init_gives_parameters_in_the_models_format():
    m = nn.mlp().bind(d_model=8, d_ff=16)
    for fmt in FLOATS:
        p = ncd.init(m.cast(fmt), seed=0)
        assert {v.dtype for v in p.values()} == {fmt.numpy}
    assert {v.dtype for v in ncd.init(m).values()} == {np.dtype(np.float32)}
    p64 = ncd.init(m.cast(ncd.bfloat16), dtype=np.float64)  # an explicit override
    assert {v.dtype for v in p64.values()} == {np.dtype(np.float64)}
    assert all(pp.dtype is ncd.bfloat16 for pp in m.cast(ncd.bfloat16).graph.params().values())


# -- prepare: arrays meet wires ----------------------------------------------------------------
def test_prepare_on_reduced_wires():
    from ncd.reference import prepare

    sm = ops.softmax("x").over("r").cast(ncd.bfloat16)
    x32 = np.ones((2, 3), np.float32)
    # same_kind (ncd.run): rounded to the wire's format; safe: refused, never rounded silently
    _, (arr,), _ = prepare(sm, [x32], None)
    assert arr.dtype == ml_dtypes.bfloat16
    with pytest.raises(ncd.DTypeError, match=r"wire is bfloat16.*not 'safe'.*ml_dtypes.bfloat16"):
        prepare(sm, [x32], None, cast="safe")
    _, (arr,), _ = prepare(sm, [x32.astype(ml_dtypes.bfloat16)], None, cast="safe")
    assert arr.dtype == ml_dtypes.bfloat16
    # a bf16 array on a float32 wire is widened, even under safe
    _, (arr,), _ = prepare(ops.softmax("x"), [np.ones(3, ml_dtypes.bfloat16)], None, cast="safe")
    assert arr.dtype == np.float32
    # parameters are checked against their own format
    lin = ops.linear("d -> e").bind(d=3, e=2).cast(ncd.float16)
    p32 = {k: v.astype(np.float32) for k, v in ncd.init(lin).items()}
    with pytest.raises(ncd.DTypeError, match=r"parameter .*weight \(float16\)"):
        prepare(lin, [np.ones(3, np.float16)], p32, cast="safe")
    # float ids on an int wire stay refused, bf16 ones too
    emb = nn.gpt(layers=1).bind(seq=2, d_model=8, heads=2, d_head=4, d_ff=8, vocab=5)
    with pytest.raises(ncd.DTypeError, match="float ids"):
        prepare(emb.cast(ncd.bfloat16), [np.zeros(2, ml_dtypes.bfloat16)], None)


def test_float32_models_behave_as_before():
    m = ops.softmax("x").over("r")
    x64 = np.random.default_rng(0).standard_normal((3, 7))
    assert ncd.run(m, x64).dtype == np.float64  # a wider array still runs as given
    assert ncd.run(m, x64.astype(np.float16)).dtype == np.float32  # a narrower one widens


def test_cast_of_traced_and_loaded_models():
    (s, d) = ncd.axes("s d", d=8)

    @ncd.trace(inputs=[ncd.ArrayType((s, d))])
    def resid(x: ncd.Tensor) -> ncd.Tensor:
        return x + ops.linear(d, d)(ops.relu()(x))

    loaded = ncd.from_json(ncd.to_json(resid))
    for m in (resid, loaded):
        c = m.cast(ncd.float16)
        p = ncd.init(c, seed=2)
        x = _rows((5, 8), ncd.float16)
        got = ncd.run(c, x, params=p)
        assert got.dtype == np.float16
        p64 = {k: v.astype(np.float64) for k, v in p.items()}
        _close(ncd.float16, got, ncd.run(m, x.astype(np.float64), params=p64), scale=4.0)


def test_mixed_precision_with_explicit_casts():
    base = nn.mlp().over("s").bind(s=3, d_model=8, d_ff=16)
    head = ops.linear("d_model -> o").bind(o=4).named("head")
    m = ncd.identity(*base.domain) >> ops.cast(ncd.bfloat16) >> base.cast(ncd.bfloat16)
    m = m >> ops.cast(ncd.float32) >> head
    p = ncd.init(m)
    assert {v.dtype for k, v in p.items() if k.startswith("head")} == {np.dtype(np.float32)}
    assert {v.dtype for k, v in p.items() if not k.startswith("head")} == {
        np.dtype(ml_dtypes.bfloat16)
    }
    x = _rows((3, 8), ncd.float32)
    out = ncd.run(m, x, params=p)
    assert out.dtype == np.float32 and out.shape == (3, 4)
    assert ":bfloat16 -> float32" in m.explain()


@pytest.mark.parametrize("fmt", [*REDUCED, ncd.float64], ids=str)
def test_cast_commutes_with_lifting_binding_and_naming(fmt):
    r = ncd.Axis("r")
    base = ops.layernorm("x") >> ops.gelu()
    x = _rows((4, 13), fmt, 3)
    variants = [
        base.cast(fmt).over(r).bind(x=13),
        base.over(r).cast(fmt).bind(x=13),
        base.over(r).bind(x=13).cast(fmt),
        base.named("blk").over(r).bind(x=13).cast(fmt),
    ]
    params = [ncd.init(v, seed=0) for v in variants]
    assert all(list(p) in (["layernorm.weight", "layernorm.bias"],) for p in params[:3])
    outs = [ncd.run(v, x, params=p) for v, p in zip(variants, params)]
    for out in outs:
        assert out.dtype == fmt.numpy
        np.testing.assert_array_equal(out, outs[0])
