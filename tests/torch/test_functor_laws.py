"""The export is a functor: composition, juxtaposition and lifting map to their PyTorch
counterparts (DESIGN.md section 3). Sizes stay free, so each exported piece reads them from
its inputs."""

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

import ncd
from ncd import ops
from ncd_torch import to_module


def _scaled(d):
    return ops.einsum("q d, x d -> q x", d=d) >> ops.scale(d)


PIECES = {
    "scores": lambda: ops.einsum("q d, x d -> q x"),
    "scaled": lambda: _scaled(ncd.Axis("d")),
    "softmax": lambda: ops.softmax("x"),
    "causal": lambda: ops.causal_mask("q", "x"),
    "gelu": lambda: ops.gelu(),
    "l2norm": lambda: ops.l2norm("x"),
}
PAIRS = [
    ("scores", "softmax"),
    ("scaled", "causal"),
    ("scores", "causal"),
    ("causal", "softmax"),
    ("scores", "gelu"),
    ("softmax", "l2norm"),
]


def _t(rng, *shape):
    return torch.from_numpy(rng.standard_normal(shape))


@pytest.mark.parametrize(("f", "g"), PAIRS)
@settings(max_examples=5, deadline=None)
@given(q=st.integers(1, 9), x=st.integers(1, 9), d=st.integers(1, 5))
def test_sequential_composition(f, g, q, x, d):
    rng = np.random.default_rng(q * 100 + x * 10 + d)
    first, second = PIECES[f](), PIECES[g]()
    args = [_t(rng, q, d), _t(rng, x, d)] if f in ("scores", "scaled") else [_t(rng, q, x)]
    together = to_module(first >> second)(*args)
    apart = to_module(second)(to_module(first)(*args))
    torch.testing.assert_close(together, apart, equal_nan=True)  # fully masked rows: NaN in both


@settings(max_examples=5, deadline=None)
@given(q=st.integers(1, 9), x=st.integers(1, 9), d=st.integers(1, 5))
def test_parallel_composition(q, x, d):
    rng = np.random.default_rng(q + x + d)
    a, b, c = _t(rng, q, d), _t(rng, x, d), _t(rng, q, x)
    both = to_module(PIECES["scores"]() @ PIECES["softmax"]())(a, b, c)
    torch.testing.assert_close(both[0], to_module(PIECES["scores"]())(a, b))
    torch.testing.assert_close(both[1], to_module(PIECES["softmax"]())(c))


@pytest.mark.parametrize("name", ["scores", "scaled", "softmax", "causal", "l2norm"])
@settings(max_examples=5, deadline=None)
@given(n=st.integers(1, 4), q=st.integers(1, 7), x=st.integers(1, 7), d=st.integers(1, 5))
def test_lifting_is_vmap(name, n, q, x, d):
    rng = np.random.default_rng(n * 1000 + q * 100 + x * 10 + d)
    piece = PIECES[name]()
    args = (
        [_t(rng, n, q, d), _t(rng, n, x, d)] if name in ("scores", "scaled") else [_t(rng, n, q, x)]
    )
    lifted = to_module(piece.over("h"))(*args)
    mapped = torch.vmap(to_module(piece))(*args)
    torch.testing.assert_close(lifted, mapped, equal_nan=True)
