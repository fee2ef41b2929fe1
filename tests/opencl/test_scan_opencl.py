"""``ncd.scan`` on OpenCL (issue 15): unrolled cells against the reference at awkward lengths
with non-finite inputs; a final state nothing reads (a kernel that would write nothing is not
launched); the recurrent products rendered by the tiled matmul template (an einsum with a
weight, ``ncd.codegen.plans.linear_form``)."""

from __future__ import annotations

import numpy as np
import pytest

import ncd
from ncd import nn, ops
from ncd_opencl.generate import generate

pytest.importorskip("pyopencl")

B, D = ncd.Axis("b", size=3), ncd.Axis("d", size=16)
K = ncd.Axis("k", size=16)


def _elman(n: int) -> ncd.Term:
    """An Elman cell whose state is carried on ``k`` and renamed there from ``d`` at the end of
    each step: the last rename is read by nothing, alone in its kernel."""
    t = ncd.Axis("t", size=n)

    @ncd.trace(inputs=[ncd.ArrayType((t, B, D))])
    def model(x: ncd.Tensor) -> ncd.Tensor:
        w = ops.learned((D, K), name="w")()

        def cell(h: ncd.Tensor, xt: ncd.Tensor) -> tuple[ncd.Tensor, ncd.Tensor]:
            new = ops.unary("tanh")(xt + ops.einsum("d k, k -> d", d=D, k=K)(w, h))
            return ops.rename(D, K)(new), new

        _, ys = ncd.scan(cell, over=t)(ops.constant(0.0, [B, K])(), x)
        return ys  # type: ignore[no-any-return]

    return model


@pytest.mark.parametrize("n", [1, 7, 13])
def test_an_elman_scan_matches_the_reference(n: int) -> None:
    model = _elman(n)
    params = {k: v.astype(np.float32) for k, v in ncd.init(model, seed=n).items()}
    x = np.random.default_rng(n).standard_normal((n, 3, 16)).astype(np.float32)
    x[0, 1, 2] = np.nan
    x[-1, 0, 0] = np.inf
    got = ncd.compile(model, "opencl")(x, params=params)
    want = ncd.run(model, x.astype(np.float64), params=params)
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-5)


def test_a_kernel_writing_nothing_is_not_planned() -> None:
    plan = ncd.fuse(_elman(7))
    assert all(k.outputs for k in plan.kernels)


def test_the_recurrent_products_use_the_tiled_matmul() -> None:
    model = nn.lstm(16, 16, seq=7, batch=ncd.Axis("b", size=8), label="")
    styles = [k.style for k in generate(model.graph).kernels if "einsum" in k.name]
    # the input projection of the whole sequence, then one product per step after the first
    # (the first reads the zero state its kernel makes)
    assert styles.count("tiled") == 1 + 6
