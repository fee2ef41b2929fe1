"""A causal mask shrinks the priced work of the streamed attention, as the generated kernels
skip the keys past each query's diagonal (issue [perf-fidelity]: masks shrink work)."""

from __future__ import annotations

import sympy as sp

import ncd
import ncd_perf
from ncd import nn


def _attention(causal: bool, q: int, x: int) -> object:
    return nn.attention(causal=causal).over("h").bind(h=16, q=q, x=x, d=128, v=128)


def test_causal_attention_costs_about_half() -> None:
    full = _attention(False, 8192, 8192).cast(ncd.bfloat16)
    causal = _attention(True, 8192, 8192).cast(ncd.bfloat16)
    r = ncd_perf.cost(causal, "h100").time / ncd_perf.cost(full, "h100").time
    assert 0.4 < r < 0.65


def test_the_share_is_the_count_of_unmasked_pairs() -> None:
    for q, x in ((301, 301), (13, 301), (301, 13), (1, 7)):
        full = ncd_perf.cost(_attention(False, q, x), "h100").flops["matrix"]
        causal = ncd_perf.cost(_attention(True, q, x), "h100").flops["matrix"]
        kept = sum(min(x, max(0, i + x - q + 1)) for i in range(q))  # keys j <= i + x - q
        assert sp.nsimplify(causal / full) == sp.Rational(kept, q * x), (q, x)


def test_unstreamed_kernels_price_every_score() -> None:
    full = ncd_perf.cost(_attention(False, 301, 301), "h100", fuse=False)
    causal = ncd_perf.cost(_attention(True, 301, 301), "h100", fuse=False)
    assert causal.flops["matrix"] == full.flops["matrix"]


def test_symbolic_sizes_keep_the_share_as_a_formula() -> None:
    model = nn.attention(causal=True).over("h")
    share = ncd_perf.cost(model, "h100").flops["matrix"]
    assert share.has(sp.Piecewise)
