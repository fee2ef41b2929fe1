"""FlashAttention-2's backward (``ncd.grad``'s ``FlashUnit``, issue 13) on CUDA: the kernels
compile for sm_80 and sm_90 without spills, and run against the float64 reference on a GPU
where one is, else on the host emulator (causal, 2 heads, awkward lengths)."""

from __future__ import annotations

import numpy as np
import pytest

import ncd
import ncd_cuda
from ncd import nn, ops
from ncd_cuda import emulate
from ncd_cuda.runtime import probe

ON_GPU = probe().ok
DEVICE: int | str = 0 if ON_GPU else "emulator"


def _grad(q: int, x: int) -> ncd.GradModel:
    att = nn.attention(causal=True).over("h").bind(h=2, q=q, x=x, d=8, v=8)
    return ncd.grad(att >> ops.sum(("h", "q", "v")), wrt="inputs")


@pytest.mark.parametrize("arch", ["sm_80", "sm_90"])
def test_the_backward_compiles_without_spills(arch: str) -> None:
    built = ncd_cuda.build(_grad(64, 64), arch=arch)
    assert len(built.kernels) == 6  # forward + L, sum, seed, D, dQ, dK/dV
    for k in built.kernels:
        assert k.resources.spill_stores == 0 and k.resources.spill_loads == 0, k.name


@pytest.mark.skipif(not ON_GPU and not emulate.available(), reason="no GPU and no host C++")
@pytest.mark.parametrize(("q", "x"), [(1, 1), (7, 13), (13, 13)])
def test_the_backward_runs_against_the_reference(q: int, x: int) -> None:
    g = _grad(q, x)
    rng = np.random.default_rng(q + x)
    args = [rng.standard_normal((2, n, 8)) for n in (q, x, x)]
    want = ncd.run(g, *args)[1]
    got = ncd.compile(g, "cuda", device=DEVICE)(*[a.astype(np.float32) for a in args])[1]
    for a, b in zip(got, want, strict=True):
        np.testing.assert_allclose(a, b, rtol=1e-4, atol=1e-4)
