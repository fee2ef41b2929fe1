"""FlashAttention-2's backward (``ncd.grad``'s ``FlashUnit``, issue 13) on OpenCL: attention's
gradients against the float64 reference at awkward lengths, causal and not, softmax and L2, with
non-finite inputs; no buffer of the OpenCL plan spans queries x keys; the forward's streamed
kernel writes the row statistic from its own softmax state."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

import ncd
from ncd import nn, ops

pytest.importorskip("pyopencl")


def _loss(kind: str, q: int, x: int, causal: bool, heads: int = 2) -> Any:
    make = nn.attention if kind == "softmax" else nn.spherical_attention
    att = make(causal=causal).over("h").bind(h=heads, q=q, x=x, d=5, v=3)
    return att >> ops.sum(("h", "q", "v"))


def _inputs(q: int, x: int, seed: int, heads: int = 2) -> list[np.ndarray]:
    rng = np.random.default_rng(seed)
    return [rng.standard_normal(s) for s in ((heads, q, 5), (heads, x, 5), (heads, x, 3))]


@pytest.mark.parametrize("kind", ["softmax", "l2"])
@pytest.mark.parametrize(
    ("q", "x", "causal"),
    [(1, 1, True), (7, 7, True), (13, 7, False), (7, 13, True), (301, 301, True), (13, 301, False)],
)
def test_attention_gradients_on_opencl(kind: str, q: int, x: int, causal: bool) -> None:
    if causal and kind == "l2" and q > x:
        pytest.skip("a causal L2 row with no key is 0/0 in every implementation")
    g = ncd.grad(_loss(kind, q, x, causal), wrt="inputs")
    args = _inputs(q, x, q * 1000 + x)
    want = ncd.run(g, *args)[1]
    got = ncd.compile(g, "opencl")(*[a.astype(np.float32) for a in args])[1]
    for a, b in zip(got, want, strict=True):
        np.testing.assert_allclose(a, b, rtol=2e-4, atol=2e-4 * max(1.0, np.abs(b).max()))
    plan = ncd.plan(g, "opencl")
    spans = [
        (k.name, str(plan.graph.values[v]))
        for k in plan.kernels
        for v in k.outputs
        if {"q", "x"} <= {a.name for a in plan.graph.values[v].axes}
    ]
    assert spans == []


def test_non_finite_inputs_propagate_as_on_the_reference() -> None:
    g = ncd.grad(_loss("softmax", 13, 13, True), wrt="inputs")
    args = _inputs(13, 13, 5)
    args[0][0, 3, 1] = np.nan
    args[1][1, 2, 0] = np.inf
    args[2][0, 9, 2] = -np.inf
    want = ncd.run(g, *args)[1]
    got = ncd.compile(g, "opencl")(*[a.astype(np.float32) for a in args])[1]
    for a, b in zip(got, want, strict=True):
        np.testing.assert_array_equal(np.isnan(a), np.isnan(b))
        np.testing.assert_array_equal(np.isinf(a), np.isinf(b))
        ok = np.isfinite(b)
        np.testing.assert_allclose(a[ok], b[ok], rtol=2e-4, atol=2e-4)


def test_forward_kernel_writes_the_row_statistic_from_its_softmax_state() -> None:
    g = ncd.grad(_loss("softmax", 64, 64, True), wrt="inputs")
    src = ncd.export(g, "opencl")
    first = src[src.index("__kernel") :].split("__kernel")[1]
    assert "softmax" in first.split("(")[0] and " + log(" in first
    assert "i0_x += 32" in first  # the chunked rows template, not key by key


def test_gpt_training_gradients_on_opencl_match_the_reference() -> None:
    gpt = nn.gpt(layers=2).bind(seq=13, d_model=16, heads=2, d_head=8, d_ff=32, vocab=17)
    loss = gpt >> nn.cross_entropy()
    train = ncd.grad(loss)
    params = ncd.init(loss, seed=0)
    toks, tgts = np.arange(13) % 17, (np.arange(13) * 5 + 2) % 17
    want_loss, want = ncd.run(train, toks, tgts, params=params)
    got_loss, got = ncd.compile(train, "opencl")(toks, tgts, params=params)
    assert got_loss == pytest.approx(want_loss, rel=1e-5)
    for k in want:
        np.testing.assert_allclose(got[k], want[k], rtol=1e-4, atol=2e-5, err_msg=k)
