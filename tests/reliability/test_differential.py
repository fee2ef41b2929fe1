"""Differential testing: random small models on every executable backend against the reference.

Hypothesis draws a chain of two to five ops over a (row, column) array of awkward sizes, a
float32 input salted with infinities and NaNs, and (for OpenCL) a plan: fused, local planner or
one kernel per op, tiled matmul or not, local-memory staging or not. Every backend must give the
reference's numbers, and the reference's non-finite values exactly where the reference has them
(docs/reliability.md, "Non-finite values").
"""

from __future__ import annotations

import os
from typing import Any

import numpy as np
import pytest
from hypothesis import HealthCheck, given, seed, settings
from hypothesis import strategies as st

import ncd
from ncd import ops
from ncd._term import identity

SIZES = (1, 2, 7, 13, 31)
EXAMPLES = int(os.environ.get("NCD_DIFF_EXAMPLES", "25"))

# a step of a chain is data, (kind, arguments...); `build` turns the chain into a model
UNARY = ops.UNARY_FNS  # every function of the library, so a new one is tested too
SCALAR = ops.BINARY_FNS
NORMS = ("softmax", "layernorm", "rmsnorm", "l2norm")


@st.composite
def chains(draw: Any) -> tuple[list[tuple[Any, ...]], int, int]:
    """(steps, rows, cols): every step keeps a (row, col) array except a final reduction."""
    n = draw(st.integers(2, 5))
    steps: list[tuple[Any, ...]] = []
    for k in range(n):
        last = k == n - 1
        kinds = ["unary", "scalar", "norm", "linear", "transpose", "causal"]
        if last:
            kinds.append("reduce")
        kind = draw(st.sampled_from(kinds))
        if kind == "unary":
            steps.append(("unary", draw(st.sampled_from(UNARY))))
        elif kind == "scalar":
            fn = draw(st.sampled_from(SCALAR))
            const = draw(st.sampled_from((0.0, 0.5, -1.5, 2.0, 3.0)))
            steps.append(("scalar", fn, const, draw(st.booleans())))
        elif kind == "norm":
            steps.append(("norm", draw(st.sampled_from(NORMS))))
        elif kind == "linear":
            steps.append(("linear", draw(st.sampled_from((None, *SIZES))), draw(st.booleans())))
        elif kind == "reduce":
            steps.append(("reduce", draw(st.sampled_from(("sum", "max", "min", "mean")))))
        else:
            steps.append((kind,))
    return steps, draw(st.sampled_from(SIZES)), draw(st.sampled_from(SIZES))


def build(steps: list[tuple[Any, ...]], rows: int, cols: int) -> ncd.Term:
    """The chain as a bound model; ``axes`` tracks the (leading, trailing) axis names."""
    r, c = ncd.Axis("r", size=rows), ncd.Axis("c", size=cols)
    term = identity([r, c])
    lead, last = "r", "c"
    for i, step in enumerate(steps):
        kind = step[0]
        if kind == "unary":
            term = term >> ops.unary(step[1])
        elif kind == "scalar":
            term = term >> ops.scalar(step[1], step[2], reverse=step[3])
        elif kind == "norm":
            term = term >> getattr(ops, step[1])(last)
        elif kind == "linear":
            size, bias = step[1], step[2]
            if size is None:  # the same name in and out: "c -> c"
                term = term >> ops.linear(f"{last} -> {last}", bias=bias, name=f"lin{i}")
            else:
                new = f"e{i}"
                term = term >> ops.linear(
                    f"{last} -> {new}", bias=bias, name=f"lin{i}", **{new: size}
                )
                last = new
        elif kind == "transpose":
            term = term >> ops.einsum(f"{lead} {last} -> {last} {lead}")
            lead, last = last, lead
        elif kind == "causal":
            term = term >> ops.causal_mask(lead, last)
        elif kind == "reduce":
            term = term >> ops.reduce(step[1], last)
    return term


def salted_input(data: Any, shape: tuple[int, ...]) -> np.ndarray:
    seed = data.draw(st.integers(0, 2**31 - 1), label="seed")
    rng = np.random.default_rng(seed)
    x = (rng.standard_normal(shape) * data.draw(st.sampled_from((0.5, 1.0, 3.0)))).astype(
        np.float32
    )
    specials = data.draw(
        st.lists(st.sampled_from((np.inf, -np.inf, np.nan)), max_size=3), label="specials"
    )
    for v in specials:
        x[tuple(int(rng.integers(0, n)) for n in shape)] = v
    return x


def assert_matches(got: np.ndarray, want: np.ndarray, what: str) -> None:
    """Same shape; NaN and ±inf exactly where the reference has them; finite values close
    (relative to the largest finite magnitude). A float32 result within 1% of overflow may
    round to inf on one side only."""
    got = np.asarray(got)
    assert got.shape == want.shape, f"{what}: shape {got.shape} != {want.shape}"
    if want.dtype.kind in "biu":  # truths and indices: exact, in the reference's dtype
        assert got.dtype == want.dtype, f"{what}: dtype {got.dtype} != {want.dtype}"
        np.testing.assert_array_equal(got, want, err_msg=what)
        return
    big = np.abs(want) > 3.0e38
    nan_ok = np.isnan(got) == np.isnan(want)
    assert nan_ok.all(), (
        f"{what}: NaN differs at {np.argwhere(~nan_ok)[:5].tolist()}: got "
        f"{got[~nan_ok][:5]}, want {want[~nan_ok][:5]}"
    )
    inf_ok = (np.isinf(got) == np.isinf(want)) | big
    assert inf_ok.all(), (
        f"{what}: inf differs at {np.argwhere(~inf_ok)[:5].tolist()}: got "
        f"{got[~inf_ok][:5]}, want {want[~inf_ok][:5]}"
    )
    fin = np.isfinite(want) & np.isfinite(got)
    if fin.any():
        scale = max(1.0, float(np.abs(want[fin]).max()))
        np.testing.assert_allclose(got[fin], want[fin], rtol=2e-3, atol=2e-4 * scale, err_msg=what)
    signs = np.isinf(want) & np.isinf(got)
    assert (np.sign(got[signs]) == np.sign(want[signs])).all(), f"{what}: inf of the wrong sign"


def _case(
    steps: list[tuple[Any, ...]], rows: int, cols: int, data: Any
) -> tuple[ncd.Term, np.ndarray, dict[str, np.ndarray], np.ndarray, str]:
    model = build(steps, rows, cols)
    x = salted_input(data, (rows, cols))
    params = ncd.init(model, seed=data.draw(st.integers(0, 1000), label="param seed"))
    with np.errstate(all="ignore"):
        want = np.asarray(ncd.run(model, x, params=params))
    return model, x, params, want, f"steps={steps} rows={rows} cols={cols}"


SEED = os.environ.get("NCD_DIFF_SEED")  # a seed for a fresh hunt; unset: derandomised
SETTINGS = settings(
    max_examples=EXAMPLES,
    deadline=None,
    derandomize=SEED is None,
    database=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)


#: per backend, the compile options drawn at random (a plan for OpenCL); others take none
OPTIONS: dict[str, Any] = {
    "opencl": st.fixed_dictionaries(
        {
            "fuse": st.sampled_from((True, "local", False)),
            "tiled": st.booleans(),
            "local_memory": st.sampled_from((None, True)),
        }
    ),
}


def executable_backends() -> list[Any]:
    """Every installed backend but the reference itself (third-party ones included); one that
    cannot run here (``Backend.unavailable``: no GPU for ncd-cuda) is skipped with its reason."""
    from ncd.plugins import registry

    out: list[Any] = []
    for name, backend in sorted(registry().backends.items()):
        if name == "reference":
            continue
        why = backend.unavailable()
        out.append(pytest.param(name, marks=pytest.mark.skip(reason=why)) if why else name)
    return out


@pytest.mark.parametrize("target", executable_backends())
@(seed(int(SEED)) if SEED is not None else (lambda f: f))
@SETTINGS
@given(chain=chains(), data=st.data())
def test_backend_matches_reference(target: str, chain: Any, data: Any) -> None:
    steps, rows, cols = chain
    model, x, params, want, what = _case(steps, rows, cols, data)
    options = data.draw(OPTIONS.get(target, st.just({})), label="options")
    with np.errstate(all="ignore"):
        got = ncd.compile(model, target, **options)(x, params=params)
    assert_matches(got, want, f"{target} {options} {what}")


#: chains the hunt above once caught a backend getting wrong, with the inputs that showed it
REGRESSIONS = [
    # softmax of a single inf: NaN (inf - inf), not 1
    ([("transpose",), ("norm", "softmax")], np.array([[np.inf]], np.float32)),
    # x ** 0.5 is sqrt: NaN at -inf (a causal row that sees no key), not C pow's +inf
    ([("causal",), ("scalar", "pow", 0.5, False)], np.array([[0.5], [2.0]], np.float32)),
    # (-1.5) ** x: a negative constant printed without parentheses became -(1.5 ** x)
    (
        [("unary", "exp"), ("scalar", "pow", -1.5, True)],
        np.array([[-1.25, 0.0, np.inf, -np.inf, 0.6931472]], np.float32),
    ),
]


@pytest.mark.parametrize("target", executable_backends())
@pytest.mark.parametrize(("steps", "x"), REGRESSIONS, ids=[str(s) for s, _ in REGRESSIONS])
def test_past_findings_stay_fixed(target: str, steps: list[tuple[Any, ...]], x: np.ndarray) -> None:
    model = build(steps, *x.shape)
    params = ncd.init(model, seed=0)
    with np.errstate(all="ignore"):
        want = np.asarray(ncd.run(model, x, params=params))
        got = ncd.compile(model, target)(x, params=params)
    assert_matches(got, want, f"{target} {steps}")
