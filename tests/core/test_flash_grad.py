"""``ncd.grad`` of normalised contractions in FlashAttention-2's form (``ncd.autodiff.FlashUnit``,
issue 13): the forward keeps its row statistic, the backward recomputes the probabilities from
Q and K in a kernel streaming the keys (dQ) and one streaming the queries (dK, dV), and no
value spanning queries x keys leaves a kernel; gradients equal central differences and the
plain rules' at awkward sizes, non-finite inputs included."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
from test_grad import check, normal

import ncd
from ncd import nn, ops
from ncd.autodiff import flash_units
from ncd.graph import as_graph

SIZES = [(1, 1), (7, 7), (13, 13), (7, 13), (13, 5)]


def _attention(kind: str, q: int, x: int, causal: bool = False, d: int = 3, v: int = 4) -> Any:
    make = nn.attention if kind == "softmax" else nn.spherical_attention
    return make(causal=causal).bind(q=q, x=x, d=d, v=v)


def _spanning(plan: ncd.FusionPlan, a: ncd.Axis, b: ncd.Axis) -> list[str]:
    """Kernel outputs spanning both ``a`` and ``b`` (up to renames: by name and size)."""
    g = plan.graph
    out = []
    for k in plan.kernels:
        for v in k.outputs:
            names = {c.name for c in g.values[v].axes}
            if {a.name, b.name} <= names:
                out.append(f"{k.name}: {g.values[v]}")
    return out


@pytest.mark.parametrize("kind", ["softmax", "l2"])
@pytest.mark.parametrize(("q", "x"), SIZES)
def test_gradient_equals_central_differences(kind: str, q: int, x: int) -> None:
    causal = q <= x and kind == "softmax"
    model = _attention(kind, q, x, causal)
    assert len(flash_units(as_graph(model, "test"))) == 1
    check(model, normal(q, 3), normal(x, 3), normal(x, 4))


@pytest.mark.parametrize("kind", ["softmax", "l2"])
@pytest.mark.parametrize("causal", [False, True])
def test_the_backward_is_three_streamed_kernels_and_writes_no_scores(
    kind: str, causal: bool
) -> None:
    model = _attention(kind, 13, 13, causal) >> ops.sum(("q", "v"))
    g = ncd.grad(model, wrt="inputs").graph
    plan = ncd.fuse(g)
    qa, xa = (a for a in as_graph(model, "test").axes if a.name in ("q", "x"))
    assert _spanning(plan, qa, xa) == []
    streams = sorted(p.axis.name for k in plan.kernels for p in k.partitions if p.kind == "stream")
    # the forward and dQ stream the keys, dK/dV stream the queries (d's and v's sums aside)
    assert streams.count("x") == 2 and streams.count("q") == 1
    stats = [k for k in plan.kernels if any(g.nodes[i].op.kind == "reduce" for i in k.nodes)]
    forward = next(
        k for k in plan.kernels if any(g.nodes[i].op.category == "normaliser" for i in k.nodes)
    )
    assert len(forward.outputs) == 2  # O and the row statistic
    assert stats
    plain = ncd.fuse(ncd.grad(model, wrt="inputs", flash=False).graph)
    assert _spanning(plain, qa, xa)  # the plain rules write P and dS, seq x seq


@pytest.mark.parametrize("kind", ["softmax", "l2"])
def test_flash_and_plain_rules_agree_with_non_finite_inputs(kind: str) -> None:
    model = _attention(kind, 7, 13, causal=False) >> ops.sum(("q", "v"))
    rng = np.random.default_rng(3)
    qm, k, v = rng.normal(size=(7, 3)), rng.normal(size=(13, 3)), rng.normal(size=(13, 4))
    qm[2, 1] = np.nan
    k[4, 0] = np.inf
    v[5, 2] = -np.inf
    for args in ((qm, k, v), (qm, np.ones((13, 3)), v), (np.zeros((7, 3)), k, v)):
        fast = ncd.run(ncd.grad(model, wrt="inputs"), *args)[1]
        slow = ncd.run(ncd.grad(model, wrt="inputs", flash=False), *args)[1]
        for a, b in zip(fast, slow, strict=True):
            np.testing.assert_array_equal(np.isnan(a), np.isnan(b))
            finite = np.isfinite(a) & np.isfinite(b)
            np.testing.assert_allclose(a[finite], b[finite], rtol=1e-12, atol=1e-12)


def test_gpt_gradients_match_the_plain_rules() -> None:
    gpt = nn.gpt(layers=2).bind(seq=7, d_model=8, heads=2, d_head=4, d_ff=16, vocab=11)
    loss = gpt >> nn.cross_entropy()
    assert len(flash_units(as_graph(loss, "test"))) == 2  # one per layer
    params = {k: v.astype(np.float64) for k, v in ncd.init(loss, seed=0).items()}
    toks, tgts = np.arange(7) % 11, (np.arange(7) * 3 + 1) % 11
    fast_loss, fast = ncd.run(ncd.grad(loss), toks, tgts, params=params)
    slow_loss, slow = ncd.run(ncd.grad(loss, flash=False), toks, tgts, params=params)
    assert fast_loss == pytest.approx(slow_loss, rel=1e-14)
    for name in params:
        np.testing.assert_allclose(fast[name], slow[name], rtol=1e-10, atol=1e-13, err_msg=name)
    plan = ncd.fuse(ncd.grad(loss).graph)
    seq = [a for a in plan.graph.axes if plan.graph.size(a) == 7]
    assert not [
        k.name
        for k in plan.kernels
        for v in k.outputs
        if sum(a in seq for a in plan.graph.values[v].axes) >= 2
    ]


def test_an_attention_whose_probabilities_are_read_twice_keeps_the_plain_rule() -> None:
    qa, xa, da = ncd.Axis("q", size=5), ncd.Axis("x", size=5), ncd.Axis("d", size=3)

    @ncd.trace(inputs=[ncd.ArrayType((qa, da)), ncd.ArrayType((xa, da))])
    def twice(q: ncd.Tensor, k: ncd.Tensor) -> ncd.Tensor:
        p = ops.softmax(xa)(ops.einsum("q d, x d -> q x", q=qa, x=xa, d=da)(q, k))
        return ops.einsum("q x, x d -> q d", q=qa, x=xa, d=da)(p, k), ops.sum(("q", "x"))(p)

    assert flash_units(as_graph(twice, "test")) == []
    check(twice, normal(5, 3), normal(5, 3))
