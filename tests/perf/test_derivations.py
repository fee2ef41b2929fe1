"""The napkin derivations, exactly (sympy), with no attention-specific code in ncd-perf."""

from __future__ import annotations

import sympy as sp

import ncd
import ncd_perf
from ncd import nn, ops

a, b, c, q, x, d, v, M, N = sp.symbols("a b c q x d v M N", positive=True)
M1, M2 = sp.symbols("M1 M2", positive=True)
ATT = ops.einsum("q d, x d -> q x") >> ops.softmax("x") >> ops.einsum("q x, x v -> q v")
SQUARE = {q: N, x: N, v: d}


def test_issue_acceptance_example_as_written() -> None:
    machine = ncd_perf.Machine.two_level(fast_capacity=M)
    mm = ncd_perf.optimise(ops.einsum("a b, b c -> a c"), machine)
    print(mm.schedule, mm.transfers)
    assert sp.simplify(mm.transfers - (2 * a * b * c / sp.sqrt(M) + a * c)) == 0
    flash = ncd_perf.optimise(ATT, machine)
    lead = sp.limit(flash.transfers.subs({q: N, x: N, v: d}) / (N**2 * d**2 / M), N, sp.oo)
    assert lead.is_positive and lead.is_finite
    naive = ncd_perf.cost(ATT, machine, fuse=False)
    assert sp.limit(naive.transfers.subs({q: N, x: N, v: d}) / N**2, N, sp.oo).is_positive


def test_matmul_unbounded_memory_moves_each_operand_once() -> None:
    mm = ncd_perf.optimise(ops.einsum("a b, b c -> a c"), ncd_perf.Machine.two_level(sp.oo))
    assert sp.simplify(mm.transfers - (a * b + b * c + a * c)) == 0


def test_matmul_optimal_tiles_are_square_root_of_capacity() -> None:
    mm = ncd_perf.optimise(ops.einsum("a b, b c -> a c"), ncd_perf.Machine.two_level(M))
    (k,) = mm.kernels
    assert set(k.levels[0].tiles.values()) == {sp.sqrt(M)}
    assert k.formulas.stream is not None and k.formulas.stream.name == "b"
    assert sp.simplify(k.levels[0].resident - M) == 0  # the capacity binds


def test_unfused_attention_is_theta_nd_plus_n_squared() -> None:
    naive = ncd_perf.cost(ATT, ncd_perf.Machine.two_level(sp.oo), fuse=False).transfers
    ratio = sp.limit(naive.subs(SQUARE) / (N * d + N**2), N, sp.oo)
    assert ratio.is_positive and ratio.is_finite
    # and the N^2 term is the score matrix written and read back (three times)
    assert sp.expand(naive.subs(SQUARE)).coeff(N, 2) == 4


def test_streamed_attention_is_theta_n2_d2_over_m_and_writes_no_scores() -> None:
    flash = ncd_perf.optimise(ATT, ncd_perf.Machine.two_level(M))
    (k,) = flash.kernels
    assert k.formulas.stream.name == "x"
    h = flash.transfers.subs(SQUARE)
    # (d + v)(d + v + 2) / M with v = d: Q and O tiles plus the running max and sum per row
    assert sp.simplify(sp.limit(h / (N**2 * d**2 / M), N, sp.oo) - 4 * (d + 1) / d) == 0
    unbounded = ncd_perf.optimise(ATT, ncd_perf.Machine.two_level(sp.oo)).transfers
    assert sp.simplify(unbounded - (q * d + x * d + x * v + q * v)) == 0  # inputs and output once


def test_spherical_attention_same_order_without_exponentials() -> None:
    sph = nn.spherical_attention(q="q", x="x", d="d", v="v")
    cost = ncd_perf.optimise(sph, ncd_perf.Machine.two_level(M))
    (k,) = cost.kernels
    assert k.formulas.stream.name == "x"
    h = cost.transfers.subs(SQUARE)
    lead = sp.limit(h / (N**2 * d**2 / M), N, sp.oo)
    assert lead.is_positive and lead.is_finite
    special = cost.flops.get("special", 0)
    assert sp.limit(special.subs(SQUARE) / N**2, N, sp.oo) == 0  # one sqrt per row, no exp
    soft = ncd_perf.optimise(
        nn.attention(q="q", x="x", d="d", v="v"), ncd_perf.Machine.two_level(M)
    )
    assert sp.limit(soft.flops["special"].subs(SQUARE) / N**2, N, sp.oo) == 1  # one exp per score


def test_multi_level_matmul_applies_the_bound_at_every_level() -> None:
    machine = ncd_perf.Machine(
        "three-level",
        [
            ncd_perf.Level("slow"),
            ncd_perf.Level("mid", M1, unit="elements"),
            ncd_perf.Level("fast", M2, unit="elements"),
        ],
    )
    mm = ncd_perf.optimise(ops.einsum("a b, b c -> a c"), machine)
    assert sp.simplify(mm.transfers_at(1) - (2 * a * b * c / sp.sqrt(M1) + a * c)) == 0
    assert sp.simplify(mm.transfers_at(2) - (2 * a * b * c / sp.sqrt(M2) + a * c)) == 0


def test_bytes_follow_each_wire_dtype() -> None:
    m = nn.mlp().over("seq").bind(seq=512, d_model=256, d_ff=1024)
    fp32 = ncd_perf.cost(m, "h100")
    bf16 = ncd_perf.cost(m, "h100", dtype="bfloat16")
    fp8 = ncd_perf.cost(m, "h100", dtype="float8")
    b32, b16, b8 = (float(c.transfers_at(1, "bytes")) for c in (fp32, bf16, fp8))
    assert b32 == 2 * b16 == 4 * b8
    assert fp32.transfers == bf16.transfers  # elements are the same


def test_traced_dtype_is_priced() -> None:
    (s, e) = ncd.axes("s e", s=64, e=32)

    @ncd.trace(inputs=[ncd.ArrayType((s, e), "bfloat16")])
    def half(t: ncd.Tensor) -> ncd.Tensor:
        return ops.exp()(t)

    (k,) = ncd_perf.cost(half, ncd_perf.Machine.two_level(sp.oo, unit="bytes")).kernels
    assert float(k.levels[0].bytes) == 2 * 64 * 32 * 2


def test_symbolic_block_schedule_has_the_flash_tile() -> None:
    block = ncd_perf.optimise(nn.transformer_block(), ncd_perf.Machine.two_level(M))
    flash = [k for k in block.kernels if k.formulas.stream and k.formulas.stream.name == "seq_k"]
    (k,) = flash
    d_head = sp.Symbol("d_head", positive=True)
    tiles = {str(s): t for s, t in k.levels[0].tiles.items()}
    assert sp.simplify(tiles["t_seq"] - M / (2 * (d_head + 1))) == 0 and tiles["t_heads"] == 1
