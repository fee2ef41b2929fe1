"""The panel GEMM (``ncd_opencl.matmul._panel``): a float32 weight parameter packed on the device
into 32-column panels, 8 rows x one panel per work-item in 16-float vectors. Forced with
``lanes=16`` so it runs on every host (an AVX2 device splits the vectors, slower but exact);
checked against the float64 reference at awkward sizes, with non-finite inputs, run-time rows,
in-place parameter changes, user tiles and the tuner's space."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

import ncd
from ncd import nn, ops
from ncd_opencl.generate import generate

pytest.importorskip("pyopencl")


def _reference(model: Any, *xs: np.ndarray, params: Any = None) -> Any:
    return ncd.run(model, *[x.astype(np.float64) for x in xs], params=params)


def _panelled(model: Any) -> bool:
    gen = generate(model.graph, lanes=16)
    return any(b.panel for k in gen.kernels for b in k.buffers)


def _model(s: int, d: int, e: int, tail: str) -> Any:
    rows, din, dout = ncd.Axis("s", size=s), ncd.Axis("d", size=d), ncd.Axis("e", size=e)
    lin = ops.linear(din, dout) if tail != "nobias" else ops.linear(din, dout, bias=False)
    if tail == "gelu":  # bias + activation: the float8 epilogue
        return (lin >> ops.gelu()).over(rows)
    if tail != "residual":
        return lin.over(rows)
    up, down = ops.linear(din, dout), ops.linear(dout, din)

    @ncd.trace(inputs=[ncd.ArrayType((rows, din))], name="residual")
    def block(x: Any) -> Any:  # an operand read per element: the generic epilogue
        return x + down(ops.gelu()(up(x)))

    return block


@pytest.mark.parametrize(("s", "d", "e"), [(8, 8, 32), (13, 24, 33), (301, 40, 96), (9, 32, 301)])
@pytest.mark.parametrize("tail", ["gelu", "nobias", "plain", "residual"])
def test_linears_match_the_reference(s: int, d: int, e: int, tail: str) -> None:
    model = _model(s, d, e, tail)
    assert _panelled(model)
    params = ncd.init(model, seed=s + e)
    x = np.random.default_rng(s * e).standard_normal((s, d)).astype(np.float32)
    x[0, 1] = np.nan  # a NaN row and an infinite element propagate as on the reference
    x[-1, 0] = np.inf
    got = ncd.compile(model, "opencl", lanes=16)(x, params=params)
    want = _reference(model, x, params=params)
    np.testing.assert_allclose(got, want, rtol=3e-5, atol=3e-5)
    same = ncd.compile(model, "opencl", lanes=8)(x, params=params)
    np.testing.assert_allclose(got, same, rtol=3e-5, atol=3e-5)


def test_gpt_runs_through_panels_like_the_reference() -> None:
    gpt = nn.gpt(layers=2).bind(seq=13, d_model=64, heads=4, d_head=16, d_ff=128, vocab=97)
    gen = generate(gpt.graph, lanes=16)
    assert sum(1 for k in gen.kernels if any(b.panel for b in k.buffers)) >= 6
    params = ncd.init(gpt, seed=0)
    tokens = np.random.default_rng(0).integers(0, 97, 13)
    got = ncd.compile(gpt, "opencl", lanes=16)(tokens, params=params)
    want = ncd.run(gpt, tokens, params=params)
    np.testing.assert_allclose(got, want, atol=3e-4)


def test_run_time_rows_take_one_build() -> None:
    model = (ops.linear("d -> e", d=16, e=64) >> ops.gelu()).over("s")
    exe = ncd.compile(model, "opencl", lanes=16)
    params = ncd.init(model.bind(s=8), seed=3)
    rng = np.random.default_rng(3)
    for s in (8, 13, 301, 1):
        x = rng.standard_normal((s, 16)).astype(np.float32)
        got = exe(x, params=params)
        np.testing.assert_allclose(
            got, _reference(model.bind(s=s), x, params=params), rtol=3e-5, atol=3e-5
        )
    assert exe.builds == 1


def test_a_weight_changed_in_place_is_packed_again() -> None:
    model = ops.linear("d -> e", d=16, e=64).over(ncd.Axis("s", size=16))
    params = {k: np.array(v, dtype=np.float32) for k, v in ncd.init(model, seed=4).items()}
    x = np.random.default_rng(4).standard_normal((16, 16)).astype(np.float32)
    exe = ncd.compile(model, "opencl", lanes=16)
    first = exe(x, params=params)
    weight = next(k for k in params if k.endswith("weight"))
    params[weight] *= -2.0  # the same array, new values
    second = exe(x, params=params)
    np.testing.assert_allclose(second, _reference(model, x, params=params), rtol=3e-5, atol=3e-5)
    assert not np.allclose(first, second)


def test_user_tiles_set_the_group_of_rows() -> None:
    model = (ops.linear("d -> e", d=16, e=96) >> ops.gelu()).over(ncd.Axis("s", size=301))
    plan = ncd.plan(model, target="opencl", lanes=16, tiles={("s", 0): 32})
    (src,) = generate(model.graph, plan=plan, lanes=16).kernels
    assert src.local_size == (1, 4)  # (panels, rows) of work-items: 32 rows = 4 x 8
    params = ncd.init(model, seed=5)
    x = np.random.default_rng(5).standard_normal((301, 16)).astype(np.float32)
    got = ncd.compile(model, "opencl", plan=plan, lanes=16)(x, params=params)
    np.testing.assert_allclose(got, _reference(model, x, params=params), rtol=3e-5, atol=3e-5)


def test_narrow_weights_and_few_rows_keep_the_dot_product_block() -> None:
    for model in (
        ops.linear("d -> e", d=16, e=31).over(ncd.Axis("s", size=64)),  # under one panel
        ops.linear("d -> e", d=16, e=64).over(ncd.Axis("s", size=7)),  # under one block
    ):
        assert not _panelled(model)
        assert any(k.style == "tiled" for k in generate(model.graph, lanes=16).kernels)


def test_the_tuner_offers_panel_groups() -> None:
    from ncd_opencl.tuning import candidates

    model = ops.linear("d -> e", d=16, e=64).over(ncd.Axis("s", size=256))
    (k,) = ncd.plan(model, target="opencl", lanes=16).kernels
    labels = [c.label for c in candidates(k, lanes=16)]
    assert "wg=4x1" in labels and "wg=32x1" in labels
    assert not any(label == "wg=8x8" for label in labels)
