"""Issue 10, finding 5: the OpenCL backend keeps the reference's IEEE semantics for infinities
and NaNs by default (no ``-cl-finite-math-only``), on the vector rows and on the scalar path,
and follows one rule for fully masked rows: a softmax whose every input is -inf, or a causal
row that sees no key, gives NaN (0/0), as the reference, ``torch.softmax`` and the torch
export do. ``fast_math=True`` is the explicit finite-math-only option."""

from __future__ import annotations

import warnings
from collections.abc import Callable, Iterator
from typing import Any

import numpy as np
import pytest

import ncd
from ncd import nn, ops
from ncd.axis import ArrayType, Axis

pytest.importorskip("pyopencl")

from ncd_opencl.backend import OpenCLExecutable
from ncd_opencl.program import default_options

pytestmark = pytest.mark.opencl

INF, NAN = np.inf, np.nan
#: 16 values (two float8 vectors) with every non-finite and overflowing case
VALUES = np.array(
    [0, -0.0, 1, -1, -100, 100, INF, -INF, NAN, 1e30, -1e30, 88.8, -88.8, 3, 0.5, -7], np.float32
)
UNARY = ops.UNARY_FNS
BINARY = tuple(fn for fn in ops.BINARY_FNS if fn != "pow")  # pow: with constants, below
SIZES = (1, 7, 13, 301)


@pytest.fixture(params=["vector", "scalar"])
def path(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> Iterator[str]:
    """The vector rows (the dialect's float8) or the scalar renderer (``vector_width`` 0)."""
    if request.param == "scalar":
        import attrs

        import ncd_opencl.generate as gen

        monkeypatch.setattr(gen, "OPENCL", attrs.evolve(gen.OPENCL, vector_width=0))
    yield request.param


def _side_by_side(models: list[ncd.Term]) -> ncd.Term:
    out = models[0]
    for m in models[1:]:
        out = out @ m
    return out


def _fan(terms: list[ncd.Term], inputs: int = 1) -> ncd.Term:
    """Every term applied to the same ``inputs`` arrays over (r=2, c=16): one kernel for them all
    (a cold PoCL build costs ~0.2 s per kernel, so a model per term was seconds per test)."""
    r, c = Axis("r", size=2), Axis("c", size=16)

    @ncd.trace(inputs=[ArrayType((r, c))] * inputs)
    def fan(*xs: Any) -> Any:
        return tuple(t(*xs) for t in terms)

    return fan


def _check(
    model: ncd.Term, xs: list[np.ndarray], labels: list[str], **options: Any
) -> list[np.ndarray]:
    params = ncd.init(model, seed=0)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)  # the reference's overflow warnings
        want = ncd.run(model, *xs, params=params)
    got = OpenCLExecutable(model, **options)(*xs, params=params)
    want = list(want) if isinstance(want, tuple) else [want]
    got = list(got) if isinstance(got, tuple) else [got]
    assert len(got) == len(want) == len(labels)
    for label, g, w in zip(labels, got, want, strict=True):
        np.testing.assert_allclose(g, w, rtol=1e-4, atol=1e-5, equal_nan=True, err_msg=label)
    return got


def _rows() -> np.ndarray:
    return np.stack([VALUES, -VALUES])


def test_unary_functions_keep_inf_and_nan(path: str) -> None:
    """recip(0) = inf, sigmoid(-100) = 0, silu(-100) = -0, gelu(inf) = inf, NaN stays NaN."""
    _check(_fan([ops.unary(fn) for fn in UNARY]), [_rows()], list(UNARY))


def test_binary_ops_with_infinite_operands(path: str) -> None:
    """``x * inf`` is written (finite-math-only dropped the store), max/min propagate NaN."""
    xs = [_rows(), np.stack([VALUES[::-1], np.full(16, INF)]).astype(np.float32)]
    _check(_fan([ops.binary(fn) for fn in BINARY], inputs=2), xs, list(BINARY))


def test_scalar_ops_with_constants_on_either_side(path: str) -> None:
    """Every scalar binary with constants 0, 0.5, -1.5, 2 on either side over the special values
    (``x ** 0.5`` is NumPy's and torch's sqrt: NaN at -inf, not C's +inf)."""
    cases = [
        (fn, c, rev)
        for fn in (*BINARY, "pow")
        for c in (0.0, 0.5, -1.5, 2.0)
        for rev in (False, True)
    ]
    # two kernels: pow keeps its kernel off the vector rows, the others take them
    model = _fan([ops.scalar(fn, c, reverse=rev) for fn, c, rev in cases if fn != "pow"]) @ _fan(
        [ops.scalar(fn, c, reverse=rev) for fn, c, rev in cases if fn == "pow"]
    )
    _check(model, [_rows(), _rows()], [str(c) for c in cases])


def test_reductions_over_non_finite_rows(path: str) -> None:
    rows = np.stack([VALUES, np.full(16, -INF), np.ones(16), np.r_[np.ones(15), NAN]])
    fns = ("sum", "max", "min", "mean")
    models = [ops.reduce(fn, Axis("c", size=16)).over(Axis("r", size=4)) for fn in fns]
    _check(_side_by_side(models), [rows.astype(np.float32) for _ in fns], list(fns))


NORMALISERS: dict[str, Callable[[Axis], ncd.Term]] = {
    "softmax": lambda x: ops.softmax(x),
    "l2norm": lambda x: ops.l2norm(x),
    "layernorm": lambda x: ops.layernorm(x),
    "rmsnorm": lambda x: ops.rmsnorm(x),
}


@pytest.mark.parametrize("name", list(NORMALISERS))
def test_normalisers_of_non_finite_rows(name: str, path: str) -> None:
    """Row 0 all -inf (a fully masked softmax: NaN), row 1 one -inf, row 2 one +inf, row 3 one
    NaN, row 4 finite; at every awkward size (a lone -inf gives NaN, not 1.0)."""
    models, xs = [], []
    rng = np.random.default_rng(3)
    for n in SIZES:
        models.append(NORMALISERS[name](Axis("x", size=n)).over(Axis("r", size=5)))
        x = rng.standard_normal((5, n)).astype(np.float32)
        x[0, :] = -INF
        x[1, 0], x[2, -1], x[3, n // 2] = -INF, INF, NAN
        xs.append(x)
    _check(_side_by_side(models), xs, [f"{name} x={n}" for n in SIZES])


def _causal(q: int, x: int) -> ncd.Term:
    return nn.attention(causal=True).over("h").bind(h=2, q=q, x=x, d=8, v=8)


def test_causal_rows_that_see_no_key_are_nan(path: str) -> None:
    """With more queries than keys the first ``q - x`` rows see no key: NaN (the rule), not
    the last value row. Streamed attention (chunked rows template) and the plain softmax."""
    shapes = ((5, 3), (13, 7), (1, 1), (301, 13))
    models: list[ncd.Term] = [_causal(q, x) for q, x in shapes]
    models += [
        ops.causal_mask(Axis("q", size=q), Axis("x", size=x)) >> ops.softmax("x") for q, x in shapes
    ]
    model = _side_by_side(models)
    rng = np.random.default_rng(1)
    xs = [rng.standard_normal(model.graph.shape(v)).astype(np.float32) for v in model.graph.inputs]
    labels = [f"attention q={q} x={x}" for q, x in shapes] + [
        f"softmax q={q} x={x}" for q, x in shapes
    ]
    got = _check(model, xs, labels)[0]  # attention q=5 x=3
    assert np.isnan(got[:, :2]).all() and np.isfinite(got[:, 2:]).all()


def test_attention_with_infinite_scores(path: str) -> None:
    """A query of +inf (scores inf and -inf: NaN) and a NaN key, through the streamed kernel."""
    model = nn.attention().over("h").bind(h=1, q=4, x=37, d=8, v=8)
    rng = np.random.default_rng(2)
    xs = [rng.standard_normal(model.graph.shape(v)).astype(np.float32) for v in model.graph.inputs]
    xs[0][0, 1, :] = INF
    xs[1][0, 3, 0] = NAN
    _check(model, xs, ["attention"])


def test_default_build_is_ieee_and_fast_math_is_finite_only() -> None:
    """The documented options: IEEE by default (re-association, mad, no signed zeros), and
    ``fast_math=True`` adds finite-math-only (``-cl-fast-relaxed-math``)."""
    default = default_options()
    assert "-cl-unsafe-math-optimizations" in default
    assert not any("finite" in o or "fast-relaxed" in o for o in default)
    assert "-cl-fast-relaxed-math" in default_options(fast_math=True)


def test_fast_math_still_matches_on_finite_inputs() -> None:
    model = (ops.layernorm(Axis("d", size=13)) >> ops.unary("gelu")).over(Axis("r", size=7))
    x = np.random.default_rng(4).standard_normal((7, 13)).astype(np.float32)
    _check(model, [x], ["layernorm >> gelu"], fast_math=True)


@pytest.mark.torch
def test_torch_export_follows_the_masked_row_rule() -> None:
    """The torch export gives NaN for fully masked rows too (F.softmax: 0/0); its fused SDPA
    call is only used where every causal row sees a key (q and x of one size)."""
    pytest.importorskip("torch")
    from ncd_torch._backend import TorchBackend

    model = _causal(5, 3)
    rng = np.random.default_rng(1)
    xs = [rng.standard_normal(model.graph.shape(v)).astype(np.float32) for v in model.graph.inputs]
    got = np.asarray(TorchBackend().compile(model)(*xs))
    want = ncd.run(model, *xs)
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-5, equal_nan=True)
    assert np.isnan(got[:, :2]).all()
    row = np.full((2, 4), -INF, np.float32)
    soft = ops.softmax(Axis("x", size=4)).over(Axis("r", size=2))
    assert np.isnan(np.asarray(TorchBackend().compile(soft)(row))).all()
