"""Achieved-rate choices: float32 matmuls on the TF32 tensor-core path (``precision="tf32"``)."""

from __future__ import annotations

import pytest

import ncd_perf
from ncd import ops
from ncd.errors import NcdError


def test_tf32_prices_float32_matmuls_on_the_tensor_cores() -> None:
    mm = ops.einsum("a b, b c -> a c").bind(a=8192, b=8192, c=8192)
    tf32 = ncd_perf.cost(mm, "h100", precision="tf32").time
    ieee = ncd_perf.cost(mm, "h100").time
    assert tf32 < ieee / 4
    # the matmul is compute-bound at both rates: the ratio is the rates' (67 / 494.7)
    assert tf32 / ieee == pytest.approx(67 / 494.7, rel=0.05)


def test_tf32_changes_nothing_without_a_tf32_rate_or_a_float32_matmul() -> None:
    mm = ops.einsum("a b, b c -> a c").bind(a=512, b=512, c=512)
    assert ncd_perf.cost(mm, "cpu", precision="tf32").time == ncd_perf.cost(mm, "cpu").time
    sm = ops.softmax("x").over("r").bind(r=4096, x=4096)
    assert ncd_perf.cost(sm, "h100", precision="tf32").time == ncd_perf.cost(sm, "h100").time


def test_an_unknown_precision_is_a_typed_error() -> None:
    mm = ops.einsum("a b, b c -> a c").bind(a=8, b=8, c=8)
    with pytest.raises(NcdError, match="tf32"):
        ncd_perf.cost(mm, "h100", precision="fp19")
