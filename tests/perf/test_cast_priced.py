"""A cast model is priced by its own formats: bf16 wires move half the bytes of float32 ones;
an unknown format is a typed error, not a KeyError."""

import pytest
import sympy as sp

import ncd
import ncd_perf
from ncd import nn


def test_a_cast_model_is_priced_with_its_item_sizes() -> None:
    m = nn.mlp().over("seq").bind(seq=512, d_model=256, d_ff=1024)
    fp32, bf16, fp8 = (
        ncd_perf.cost(x, "h100") for x in (m, m.cast(ncd.bfloat16), m.cast(ncd.float8_e5m2))
    )
    b32, b16, b8 = (float(c.transfers_at(1, "bytes")) for c in (fp32, bf16, fp8))
    assert b32 == 2 * b16 == 4 * b8
    assert fp32.transfers == bf16.transfers  # the same elements move
    assert {k.dtype for k in bf16.kernels} == {ncd.bfloat16}
    # the same as re-typing every float wire of the float32 model
    assert b16 == float(ncd_perf.cost(m, "h100", dtype="bfloat16").transfers_at(1, "bytes"))


def test_a_cast_embedding_table_is_priced_in_its_format() -> None:
    # the ids are int64, but the table they index is bf16 after .cast: 2 bytes an element
    g = nn.gpt(layers=1).bind(seq=16, d_model=32, heads=2, d_head=16, d_ff=64, vocab=97)
    machine = ncd_perf.Machine.two_level(sp.oo, unit="bytes")
    b32, b16 = (
        float(ncd_perf.cost(m, machine, fuse=False).transfers_at(1, "bytes"))
        for m in (g, g.cast(ncd.bfloat16))
    )
    ints = 16 * 8  # the int64 ids are read at 8 bytes in both
    assert b32 - ints == 2 * (b16 - ints)


@pytest.mark.parametrize("bad", ["float13", "complex64"])
def test_an_unknown_format_is_a_typed_error(bad: str) -> None:
    m = nn.mlp().over("seq").bind(seq=8, d_model=16, d_ff=32)
    with pytest.raises(ncd.DTypeError, match=f"unknown element format '{bad}'.*Fix:"):
        ncd_perf.cost(m, "h100", dtype=bad)
