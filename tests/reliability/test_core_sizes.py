"""Absurd sizes fail early with ``SizeError`` naming the axes and the bytes (issue 10, finding
10): before the reference allocates, before ``ncd.init`` draws, and at bind time for element
counts past int64."""

from __future__ import annotations

import numpy as np
import pytest

import ncd
from ncd import nn, ops
from ncd.reference import check_memory
from ncd.sizes import memory_limit


def test_attention_of_a_million_queries_and_keys_is_refused_before_allocating() -> None:
    q, x = ncd.Axis("q", size=10**6), ncd.Axis("x", size=10**6)
    m = nn.attention(q, x, d=8, v=8)
    z = np.zeros((10**6, 8), np.float32)
    with pytest.raises(
        ncd.SizeError, match=r"\[q x\].*q#\w+=1000000, x#\w+=1000000.*4000000000000 bytes"
    ):
        ncd.run(m, z, z, z)


def test_a_vocabulary_of_a_billion_is_refused_by_init() -> None:
    g = nn.gpt(layers=1).bind(seq=4, d_model=8, heads=2, d_head=4, d_ff=8, vocab=10**9)
    with pytest.raises(ncd.SizeError, match=r"parameter wte\.weight over \(vocab#\w+=1000000000"):
        ncd.init(g)


def test_the_limit_follows_ncd_max_bytes(monkeypatch: pytest.MonkeyPatch) -> None:
    m = ops.softmax(ncd.Axis("d", size=301)).over(ncd.Axis("r", size=13))
    x = np.zeros((13, 301), np.float32)
    monkeypatch.setenv("NCD_MAX_BYTES", str(13 * 301 * 4))
    assert memory_limit() == 13 * 301 * 4
    ncd.run(m, x)  # exactly at the limit runs
    monkeypatch.setenv("NCD_MAX_BYTES", str(13 * 301 * 4 - 1))
    with pytest.raises(ncd.SizeError, match="15652 bytes"):
        ncd.run(m, x)
    monkeypatch.setenv("NCD_MAX_BYTES", "lots")
    with pytest.raises(ncd.SizeError, match="NCD_MAX_BYTES"):
        memory_limit()


def test_without_the_variable_the_limit_is_physical_memory(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("NCD_MAX_BYTES", raising=False)
    assert memory_limit() > 2**20
    check_memory(ops.softmax(ncd.Axis("d", size=7)).graph)


def test_element_counts_past_int64_are_refused_at_bind() -> None:
    m = ops.einsum("a b, b c -> a c")
    with pytest.raises(ncd.SizeError, match="64-bit"):
        m.bind(a=2**40, b=1, c=2**40)
    with pytest.raises(ncd.SizeError, match="2\\^62"):
        m.bind(a=10**100, b=1, c=1)
    big = m.bind(a=2**31, b=1, c=2**31)  # 2^62 elements: representable, refused only on the host
    with pytest.raises(ncd.SizeError, match="bytes"):
        check_memory(big.graph)


@pytest.mark.parametrize("n", [1, 7, 13, 301])
def test_ordinary_sizes_pass(n: int) -> None:
    m = ops.softmax(ncd.Axis("d", size=n))
    np.testing.assert_allclose(ncd.run(m, np.zeros(n, np.float32)), np.full(n, 1 / n), rtol=1e-6)
