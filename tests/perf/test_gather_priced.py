"""A gather reads one table row per id, as an embedding of a parameter does: GPT-2's tied
table (50257 x 768, 154 MB in float32) read for 8 x 128 tokens moves the rows and the ids, not
the table; an index ramp fused into its reader is computed, not read."""

import sympy as sp

import ncd
import ncd_perf
from ncd import ops
from ncd._term import identity
from ncd.axis import ArrayType


def _bytes(model: object, fuse: bool = False) -> float:
    machine = ncd_perf.Machine.two_level(sp.oo, unit="bytes")
    return float(ncd_perf.cost(model, machine, fuse=fuse).transfers_at(1, "bytes"))


def test_a_gather_moves_its_rows_not_its_table() -> None:
    b, s = ncd.Axis("batch", size=8), ncd.Axis("seq", size=128)
    v, d = ncd.Axis("vocab", size=50257), ncd.Axis("d_model", size=768)
    rows = identity(ArrayType((b, s), "int64"), (v, d)) >> ops.gather(v)
    ids, out = 8 * 128 * 8, 8 * 128 * 768 * 4
    assert _bytes(rows) == ids + 2 * out  # the rows read, the rows written
    # the same table read whole by another op (an unembedding) moves all of it
    whole = identity((v, d), (d,)) >> ops.einsum("v d, d -> v", v=v, d=d)
    assert _bytes(whole) > 50257 * 768 * 4 > 20 * _bytes(rows)


def test_an_index_ramp_reads_nothing() -> None:
    n, r = ncd.Axis("n", size=301), ncd.Axis("r", size=7)
    ramp = (identity((r, n)) @ ops.arange(n)) >> ops.add()
    assert _bytes(ramp, fuse=True) == 2 * 7 * 301 * 4  # x in, x + i out: the ramp is computed
