"""Seeded dropout (``ops.dropout(p, seed=s)``): a counter-based mask that the reference, the
OpenCL kernels and the backward pass draw alike, at sizes that are not powers of two."""

from __future__ import annotations

import importlib.util

import numpy as np
import pytest

import ncd
from ncd import counter_rng, ops

OPENCL = (
    importlib.util.find_spec("ncd_opencl") is not None
    and importlib.util.find_spec("pyopencl") is not None
)
needs_opencl = pytest.mark.skipif(not OPENCL, reason="ncd-opencl (pyopencl) is not installed")
SIZES = [1, 7, 13, 301]


def _model(n: int, p: float = 0.3, seed: int = 5) -> tuple[ncd.Term, np.ndarray]:
    a, b = ncd.Axis("a", size=n), ncd.Axis("b", size=3)
    model = ncd.identity(ncd.ArrayType((a, b))) >> ops.dropout(p, seed=seed)
    return model, np.random.default_rng(n).standard_normal((n, 3)).astype(np.float32)


def test_the_hash_is_murmur3s_finaliser_twice() -> None:
    # fmix32 by hand for position 0 and key(0), against the array implementation
    def fmix(h: int) -> int:
        h ^= h >> 16
        h = (h * 0x85EBCA6B) % 2**32
        h ^= h >> 13
        h = (h * 0xC2B2AE35) % 2**32
        return h ^ (h >> 16)

    k = counter_rng.key(0)
    assert k == fmix(0x9E3779B9)
    for i in (0, 1, 12345, 2**32 - 1):
        assert int(counter_rng.bits(np.array([i]), k)[0]) == fmix((fmix(i ^ k) + k) % 2**32)


@pytest.mark.parametrize("n", SIZES)
def test_reference_keeps_and_scales_by_position(n: int) -> None:
    model, x = _model(n)
    y = ncd.run(model, x)
    pos = np.arange(n * 3).reshape(n, 3)  # axes a, b: already in canonical (name) order
    keep = counter_rng.bits(pos, counter_rng.key(5)) >= counter_rng.threshold(0.3)
    np.testing.assert_array_equal(y != 0, keep)
    np.testing.assert_allclose(y[keep], x[keep] / 0.7, rtol=1e-6)
    np.testing.assert_array_equal(ncd.run(model, x), y)  # no state: the same mask every run


def test_masks_drop_p_of_the_elements_and_depend_on_the_seed() -> None:
    model, x = _model(20_000, p=0.25, seed=1)
    x = np.ones_like(x)
    y = ncd.run(model, x)
    assert abs(float(np.mean(y == 0)) - 0.25) < 0.01
    assert abs(float(np.mean(y)) - 1.0) < 0.02  # the 1 / (1 - p) scale keeps the mean
    other = ncd.run(_model(20_000, p=0.25, seed=2)[0], x)
    assert 0.3 < float(np.mean((y == 0) != (other == 0))) < 0.45  # independent: 2 p (1 - p)
    np.testing.assert_array_equal(ncd.run(_model(20_000, p=0.0, seed=1)[0], x), x)


def test_the_position_is_the_same_in_any_layout() -> None:
    # dropout of a transposed copy draws, element for element, the same mask
    a, b = ncd.Axis("a", size=7), ncd.Axis("b", size=13)
    x = np.random.default_rng(0).standard_normal((7, 13))
    flat = ncd.identity(ncd.ArrayType((a, b), "float64")) >> ops.dropout(0.5, seed=9)
    turned = (
        ncd.identity(ncd.ArrayType((a, b), "float64"))
        >> ops.einsum("a b -> b a", a=a, b=b)
        >> ops.dropout(0.5, seed=9)
    )
    np.testing.assert_array_equal(ncd.run(turned, x), ncd.run(flat, x).T)


def test_the_gradient_is_the_same_mask() -> None:
    model, x = _model(13)
    train = ncd.grad(model >> ops.sum(["a", "b"]), wrt="inputs")
    _, (dx,) = ncd.run(train, x)
    y = ncd.run(model, x)
    np.testing.assert_allclose(dx, np.where(y != 0, 1 / 0.7, 0.0), rtol=1e-6)
    # against float64 central differences of a smooth loss through the dropout
    w = np.random.default_rng(3).standard_normal((13, 3))
    x64 = x.astype(np.float64)
    loss = (
        ncd.identity(ncd.ArrayType(model.graph.values[0].axes, "float64"))
        >> ops.dropout(0.3, seed=5)
        >> ops.unary("tanh")
        >> ops.sum(["a", "b"])
    )
    _, (g,) = ncd.run(ncd.grad(loss, wrt="inputs"), x64 * w)
    eps = 1e-6
    for i, j in [(0, 0), (5, 2), (12, 1)]:
        up, down = (x64 * w).copy(), (x64 * w).copy()
        up[i, j] += eps
        down[i, j] -= eps
        fd = (float(ncd.run(loss, up)) - float(ncd.run(loss, down))) / (2 * eps)
        assert g[i, j] == pytest.approx(fd, rel=1e-6, abs=1e-9)


def test_unseeded_dropout_is_unchanged() -> None:
    a = ncd.Axis("a", size=301)
    model = ncd.identity(ncd.ArrayType((a,))) >> ops.dropout(0.5)
    x = np.ones(301, np.float32)
    np.testing.assert_array_equal(ncd.run(model, x), x)  # inference: the identity
    _, (dx,) = ncd.run(ncd.grad(model >> ops.sum("a"), wrt="inputs"), x)
    np.testing.assert_array_equal(dx, x)


def test_a_bad_seed_is_a_typed_error() -> None:
    for bad in (-1, 2**32, 1.5, True, "0"):
        with pytest.raises(ncd.DefinitionError, match="seed"):
            ops.dropout(0.1, seed=bad)  # type: ignore[arg-type]


def test_a_seeded_dropout_round_trips_through_json() -> None:
    model, x = _model(7)
    again = ncd.from_json(ncd.to_json(model))
    np.testing.assert_array_equal(ncd.run(again, x), ncd.run(model, x))


@needs_opencl
@pytest.mark.parametrize("n", SIZES)
def test_opencl_draws_the_reference_mask(n: int) -> None:
    model, x = _model(n)
    np.testing.assert_allclose(ncd.compile(model, "opencl")(x), ncd.run(model, x), rtol=1e-6)
    train = ncd.grad(model >> ops.unary("tanh") >> ops.sum(["a", "b"]), wrt="inputs")
    _, (want,) = ncd.run(train, x)
    _, (got,) = ncd.compile(train, "opencl")(x)
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)  # tanh' in float32


@needs_opencl
def test_opencl_draws_the_reference_mask_after_a_contraction_and_lifted() -> None:
    # fused behind a matmul (a kernel that would otherwise vectorise) and lifted over a batch
    s, d, e = ncd.Axis("s", size=13), ncd.Axis("d", size=8), ncd.Axis("e", size=16)
    model = (
        ncd.identity(ncd.ArrayType((s, d))) >> ops.linear(d, e) >> ops.dropout(0.2, seed=11)
    ).over(ncd.Axis("batch", size=3))
    params = ncd.init(model, seed=0)
    x = np.random.default_rng(0).standard_normal((3, 13, 8)).astype(np.float32)
    want = ncd.run(model, x, params=params)
    got = ncd.compile(model, "opencl")(x, params=params)
    np.testing.assert_array_equal(got == 0, want == 0)
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)


def test_gpt_dropout_is_the_identity_at_inference_and_random_in_training() -> None:
    sizes = {"d_model": 16, "heads": 2, "d_head": 8, "d_ff": 32, "vocab": 11, "seq": 7}
    plain, dropped = ncd.nn.gpt(2).bind(**sizes), ncd.nn.gpt(2, dropout=0.1).bind(**sizes)
    params = ncd.init(plain, seed=0)
    assert set(params) == set(ncd.init(dropped, seed=0))  # no parameters of its own
    ids = np.arange(7) % 11
    want = ncd.run(plain, ids, params=params)
    np.testing.assert_array_equal(ncd.run(dropped, ids, params=params), want)
    assert not np.allclose(ncd.run(dropped, ids, params=params, training=True), want)
    kinds = [type(n.op).kind for n in dropped.graph.nodes]
    assert kinds.count("dropout") == 1 + 2 * 2  # the embeddings, then both branches per layer
    with pytest.raises(ncd.DefinitionError, match=r"dropout must be a probability in \[0, 1\)"):
        ncd.nn.gpt(1, dropout=1.0)
