"""Sizes left free when compiling are kernel arguments: one build serves every length.

Every case runs the one build at awkward lengths (1, 7, 13, 301; not tile or vector multiples)
against the NumPy reference and checks that no second program was built.
"""

from __future__ import annotations

import gc
from typing import Any, ClassVar

import numpy as np
import pytest

import ncd
from ncd import nn, ops
from ncd.testing import BackendConformance, cases
from ncd_opencl.backend import check_index
from ncd_opencl.generate import generate

pytest.importorskip("pyopencl")

SIZES = (1, 7, 13, 301)


def _rng(n: int) -> np.random.Generator:
    return np.random.default_rng(n)


def _agree(exe: Any, model: Any, *xs: np.ndarray, params: Any = None, tol: float = 2e-4) -> None:
    got = exe(*xs, params=params)
    want = ncd.run(model, *xs, params=params)
    np.testing.assert_allclose(got, want, rtol=tol, atol=tol)


def test_acceptance_example_one_build_serves_three_lengths() -> None:
    blk = nn.transformer_block().bind(d_model=64, heads=4, d_head=16, d_ff=128)  # seq free
    params = ncd.init(blk, seed=0)
    exe = ncd.compile(blk, "opencl")
    for n in (8, 37, 100):
        x = np.random.default_rng(n).standard_normal((n, 64)).astype(np.float32)
        assert np.allclose(exe(x, params=params), ncd.run(blk, x, params=params), atol=2e-4)
    assert exe.builds == 1  # type: ignore[attr-defined]
    assert exe.kernel_count == len(exe.compiled(blk.graph.bind(seq=8)).launches)  # type: ignore[attr-defined]


def _row_models() -> dict[str, tuple[Any, Any]]:
    """name -> (model with the row axis ``r`` free, input shape for r = n)."""
    r = ncd.Axis("r")
    return {
        "softmax": (ops.softmax("x").over(r).bind(x=24), lambda n: (n, 24)),
        "softmax_row_free": (ops.softmax("x").over(ncd.Axis("r")).bind(r=3), lambda n: (3, n)),
        "layernorm": (ops.layernorm("d").over(ncd.Axis("r")).bind(d=16), lambda n: (n, 16)),
        "layernorm_d_free": (
            ops.layernorm("d", affine=False).over(ncd.Axis("r")).bind(r=2),
            lambda n: (2, n),
        ),
        "rmsnorm_d_free": (
            ops.rmsnorm("d", affine=False).over(ncd.Axis("r")).bind(r=3),
            lambda n: (3, n),
        ),
        "rmsnorm": (ops.rmsnorm("d").over(ncd.Axis("r")).bind(d=13), lambda n: (n, 13)),
        "linear": (ops.linear("d -> e").over(ncd.Axis("s")).bind(d=32, e=24), lambda n: (n, 32)),
        "mean_all_free": (ops.mean("d").over(ncd.Axis("r")), lambda n: (n, n + 2)),
        "mlp": (nn.mlp().over(ncd.Axis("s")).bind(d_model=16, d_ff=40), lambda n: (n, 16)),
    }


@pytest.mark.parametrize("name", list(_row_models()))
def test_row_and_matmul_kernels_at_awkward_free_lengths(name: str) -> None:
    model, shape = _row_models()[name]
    params = ncd.init(model, seed=1)
    exe = ncd.compile(model, "opencl")
    for n in SIZES:
        x = _rng(n).standard_normal(shape(n)).astype(np.float32)
        _agree(exe, model, x, params=params)
    assert exe.builds == 1  # type: ignore[attr-defined]


@pytest.mark.parametrize("causal", [False, True])
def test_attention_with_free_query_and_key_lengths(causal: bool) -> None:
    att = nn.attention(causal=causal).over("h").bind(h=2, d=16, v=8)  # q and x free
    exe = ncd.compile(att, "opencl")
    pairs = [(n, n) for n in SIZES] + ([] if causal else [(1, 13), (13, 7), (7, 301)])
    for q, x in pairs:
        rng = _rng(q * 1000 + x)
        qs = rng.standard_normal((2, q, 16)).astype(np.float32)
        ks = rng.standard_normal((2, x, 16)).astype(np.float32)
        vs = rng.standard_normal((2, x, 8)).astype(np.float32)
        _agree(exe, att, qs, ks, vs)
    assert exe.builds == 1  # type: ignore[attr-defined]


def test_causal_attention_with_keys_longer_than_queries() -> None:
    att = nn.attention(causal=True).bind(d=8, v=8)
    exe = ncd.compile(att, "opencl")
    for q, x in ((1, 7), (7, 13), (13, 301)):
        rng = _rng(q + x)
        xs = [rng.standard_normal(s).astype(np.float32) for s in ((q, 8), (x, 8), (x, 8))]
        _agree(exe, att, *xs)
    assert exe.builds == 1  # type: ignore[attr-defined]


def _gpt_body() -> Any:
    """Two causal GPT blocks and the final LayerNorm (a GPT without its embeddings: nn.gpt's
    learned positional table is over ``seq``, so its parameters fix ``seq``)."""
    s, dm, h, dh, ff, key = (
        ncd.Axis(n) for n in ("seq", "d_model", "heads", "d_head", "d_ff", "seq_k")
    )
    blocks = [
        nn.transformer_block(s, dm, h, dh, ff, seq_k=key, label=f"blocks.{i}") for i in range(2)
    ]
    body = blocks[0] >> blocks[1] >> nn.layernorm(dm, label="ln_f")
    return body.bind(d_model=32, heads=4, d_head=8, d_ff=64)


def test_gpt_layers_with_seq_free() -> None:
    gpt = _gpt_body()
    params = ncd.init(gpt, seed=0)
    exe = ncd.compile(gpt, "opencl")
    for n in SIZES:
        x = _rng(n).standard_normal((n, 32)).astype(np.float32)
        _agree(exe, gpt, x, params=params, tol=5e-4)
    assert exe.builds == 1  # type: ignore[attr-defined]


def test_gpt_layers_with_batch_and_seq_free() -> None:
    gpt = _gpt_body().over(ncd.Axis("batch"))
    params = ncd.init(gpt, seed=0)
    exe = ncd.compile(gpt, "opencl")
    for b, n in ((1, 1), (3, 7), (2, 13), (1, 301)):
        x = _rng(b * n).standard_normal((b, n, 32)).astype(np.float32)
        _agree(exe, gpt, x, params=params, tol=5e-4)
    assert exe.builds == 1  # type: ignore[attr-defined]


def test_gpt_with_batch_free() -> None:
    gpt = nn.gpt(layers=2).bind(seq=13, d_model=32, heads=4, d_head=8, d_ff=64, vocab=97)
    gpt = gpt.over(ncd.Axis("batch"))
    params = ncd.init(gpt, seed=0)
    exe = ncd.compile(gpt, "opencl")
    for b in SIZES[:3]:
        _agree(exe, gpt, _rng(b).integers(0, 97, (b, 13)), params=params, tol=5e-4)
    assert exe.builds == 1  # type: ignore[attr-defined]


def test_a_gpt_with_a_block_size_runs_every_shorter_length_from_one_build() -> None:
    """``nn.gpt(block_size=...)``: the positional table is sliced to the length, so one build
    runs lengths 1 .. |block| and a longer one is refused before any device work."""
    gpt = nn.gpt(1, block_size=301).bind(d_model=8, heads=2, d_head=4, d_ff=13, vocab=11)
    params = ncd.init(gpt, seed=0)
    exe = ncd.compile(gpt, "opencl")
    for n in SIZES:
        _agree(exe, gpt, _rng(n).integers(0, 11, n), params=params, tol=5e-4)
    assert exe.builds == 1  # type: ignore[attr-defined]
    with pytest.raises(ncd.DefinitionError, match=r"\[0:302\] of block.*ends past its size 301"):
        exe(np.zeros(302, dtype=np.int64), params=params)
    assert exe.builds == 1  # type: ignore[attr-defined]


def test_several_free_axes_at_once() -> None:
    model = (ops.softmax("x") >> ops.mul(2.0)).over(ncd.Axis("r")).over(ncd.Axis("b"))
    exe = ncd.compile(model, "opencl")
    for shape in ((1, 1, 1), (7, 13, 1), (1, 7, 301), (13, 1, 7), (2, 301, 13)):
        _agree(exe, model, _rng(sum(shape)).standard_normal(shape).astype(np.float32))
    assert exe.builds == 1  # type: ignore[attr-defined]


def test_bound_and_free_give_equal_results() -> None:
    blk = nn.transformer_block().bind(d_model=32, heads=2, d_head=16, d_ff=48)
    params = ncd.init(blk, seed=3)
    free = ncd.compile(blk, "opencl")
    for n in (1, 13, 301):
        x = _rng(n).standard_normal((n, 32)).astype(np.float32)
        bound = blk.bind(seq=n)
        got_bound = ncd.compile(bound, "opencl")(x, params=params)
        np.testing.assert_allclose(free(x, params=params), got_bound, rtol=1e-5, atol=1e-5)
    assert free.builds == 1  # type: ignore[attr-defined]


def test_sizes_bound_before_compiling_stay_literal() -> None:
    sm = ops.softmax("x").over(ncd.Axis("r"))
    free = generate(sm.bind(x=64).graph)
    bound = generate(sm.bind(x=64, r=5).graph)
    assert all(k.sizes for k in free.kernels) and "const int n_r" in free.source
    assert not any(k.sizes for k in bound.kernels) and "n_r" not in bound.source
    assert bound.kernels[0].global_size == (5,)


def test_identical_layers_share_one_function_with_free_sizes() -> None:
    gen = generate(nn.gpt(layers=3).bind(d_model=32, heads=4, d_head=8, d_ff=64, vocab=97).graph)
    bound = generate(
        nn.gpt(layers=3).bind(seq=9, d_model=32, heads=4, d_head=8, d_ff=64, vocab=97).graph
    )
    shared = sum(1 for k in gen.kernels if not k.text)
    assert shared > 0 and shared == sum(1 for k in bound.kernels if not k.text)


def test_non_finite_inputs_through_free_size_kernels() -> None:
    model = (ops.softmax("x") >> ops.gelu()).over(ncd.Axis("r"))
    exe = ncd.compile(model, "opencl")
    for n in (1, 7, 13):
        x = _rng(n).standard_normal((3, n)).astype(np.float32)
        x[0, 0] = np.inf
        x[1, :] = -np.inf
        x[2, -1] = np.nan
        with np.errstate(invalid="ignore"):
            want = ncd.run(model, x)
        np.testing.assert_allclose(exe(x), want, rtol=1e-5, atol=1e-6, equal_nan=True)
    ln = ops.layernorm("d", affine=False).over(ncd.Axis("r"))
    exe = ncd.compile(ln, "opencl")
    x = np.array([[1.0, np.inf, 2.0], [np.nan, 0.0, 1.0], [1.0, 2.0, 4.0]], np.float32)
    with np.errstate(invalid="ignore"):
        want = ncd.run(ln, x)
    np.testing.assert_allclose(exe(x), want, rtol=1e-5, atol=1e-5, equal_nan=True)


def test_intermediates_are_kept_per_size_set_and_bounded() -> None:
    model = (ops.linear("d -> e") >> ops.softmax("e")).over(ncd.Axis("s")).bind(d=8, e=16)
    params = ncd.init(model, seed=0)
    exe = ncd.compile(model, "opencl", max_builds=3)
    for n in (1, 7, 13, 301, 2):
        _agree(exe, model, _rng(n).standard_normal((n, 8)).astype(np.float32), params=params)
    (build,) = exe._built.values()  # type: ignore[attr-defined]
    assert exe.builds == 1 and len(build._sized) == 3  # type: ignore[attr-defined]
    del exe, build
    gc.collect()


def test_specialise_builds_once_per_size_set() -> None:
    model = ops.softmax("x").over(ncd.Axis("r")).bind(x=8)
    exe = ncd.compile(model, "opencl", specialise=True)
    for n in (1, 7, 7):
        _agree(exe, model, _rng(n).standard_normal((n, 8)).astype(np.float32))
    assert exe.builds == 2  # type: ignore[attr-defined]


def test_wide_build_serves_small_sizes_with_64_bit_arguments() -> None:
    model = (ops.linear("d -> e") >> ops.gelu()).over(ncd.Axis("s")).bind(d=16, e=8)
    gen = generate(model.graph, wide=True)
    assert "const long n_s" in gen.source
    params = ncd.init(model, seed=0)
    exe = ncd.compile(model, "opencl", wide=True)
    for n in SIZES:
        _agree(exe, model, _rng(n).standard_normal((n, 16)).astype(np.float32), params=params)
    assert exe.builds == 1  # type: ignore[attr-defined]


def test_a_call_past_int_indices_takes_the_64_bit_build_or_is_refused(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    import ncd_opencl.backend as backend

    # a device that would hold 2^32 floats (PoCL here allows 2 GiB in one buffer)
    monkeypatch.setattr(backend, "check_fits", lambda graph, gen, device: None)
    model = ops.relu().over(ncd.Axis("c")).over(ncd.Axis("r"))
    big = model.graph.bind(r=2**16, c=2**16)  # 2^32 elements: past what int indexes
    assert check_index(model.graph.bind(r=7, c=13), generate(model.graph), False)
    assert not check_index(big, generate(model.graph), False)
    strict = ncd.compile(model, "opencl", wide=False)
    with pytest.raises(ncd.SizeError, match=r"c#\w+ \(\?\) = 65536.*wide=False.*Fix:"):
        strict.compiled(big)  # type: ignore[attr-defined]
    auto = ncd.compile(model, "opencl")
    build = auto.compiled(big)  # type: ignore[attr-defined]
    assert build.wide and auto.builds == 2  # type: ignore[attr-defined]
    x = _rng(0).standard_normal((7, 13)).astype(np.float32)
    np.testing.assert_array_equal(auto(x), ncd.run(model, x))  # small calls: the int build
    assert auto.builds == 2  # type: ignore[attr-defined]


def test_free_sizes_are_checked_against_the_device_before_any_work() -> None:
    model = ops.relu().over(ncd.Axis("c")).over(ncd.Axis("r"))
    auto = ncd.compile(model, "opencl")
    with pytest.raises(ncd.SizeError, match="Fix:"):  # refused before the 64-bit build
        auto.compiled(model.graph.bind(r=2**30, c=2**30))  # type: ignore[attr-defined]
    assert auto.builds == 1  # type: ignore[attr-defined]
    exe = ncd.compile(model, "opencl", wide=True)
    huge = model.graph.bind(r=2**30, c=2**30)  # 2^62 elements: no device holds that
    build = exe.compiled(huge)  # type: ignore[attr-defined]
    with pytest.raises(ncd.SizeError, match="Fix:"):
        build.sized(huge)
    assert not build._sized


def test_everything_free_falls_back_to_kernels_that_take_any_length() -> None:
    """No size known when compiling: the tiled matmul and the chunked attention need K and the
    accumulator length fixed, so the plain kernels run, with every loop bound an argument."""
    mm = ops.einsum("q d, x d -> q x")
    att = nn.attention(causal=True)
    exe_mm, exe_att = ncd.compile(mm, "opencl"), ncd.compile(att, "opencl")
    for q, x, d in ((1, 1, 1), (7, 13, 3), (13, 7, 301), (301, 301, 9)):
        rng = _rng(q + x + d)
        a, b = (rng.standard_normal(s).astype(np.float32) for s in ((q, d), (x, d)))
        _agree(exe_mm, mm, a, b, tol=1e-3)
        if q == x:
            v = rng.standard_normal((x, 5)).astype(np.float32)
            _agree(exe_att, att, a, b, v, tol=1e-3)
    assert exe_mm.builds == 1 and exe_att.builds == 1  # type: ignore[attr-defined]


@pytest.mark.parametrize("model", ["softmax", "gelu", "rmsnorm"])
def test_vector_rows_of_run_time_length_end_in_a_scalar_tail(model: str) -> None:
    op = {
        "softmax": ops.softmax("x"),
        "gelu": ops.gelu(),
        "rmsnorm": ops.rmsnorm("x", affine=False),
    }
    m = op[model].over(ncd.Axis("x") if model == "gelu" else ncd.Axis("r"))
    if model == "gelu":
        m = m.over(ncd.Axis("r"))
    gen = generate(m.graph)
    assert gen.kernels[0].style == "vector" and "% 8" in gen.source
    exe = ncd.compile(m, "opencl")
    for n in (1, 7, 8, 9, 16, 17, 301):
        x = _rng(n).standard_normal((3, n)).astype(np.float32)
        x[1, n // 2] = np.inf
        with np.errstate(invalid="ignore", over="ignore"):
            want = ncd.run(m, x)
        np.testing.assert_allclose(exe(x), want, rtol=1e-5, atol=1e-5, equal_nan=True)
    assert exe.builds == 1  # type: ignore[attr-defined]


class TestOpenCLConformanceFreeSizes(BackendConformance):
    """Every conformance case with the sizes its inputs fix left to run time."""

    target = "opencl"
    free_sizes = True
    rtol = 2e-4
    atol = 2e-5


def test_free_conformance_cases_really_leave_sizes_free() -> None:
    free = [c.name for c in cases() if c.free_model().config().free]
    assert len(free) > len(cases()) // 2


class TestOpenCLConformanceFreeSizesUnfused(TestOpenCLConformanceFreeSizes):
    compile_options: ClassVar[dict[str, Any]] = {"fuse": False}


class TestOpenCLConformanceFreeSizesLocalMemory(TestOpenCLConformanceFreeSizes):
    """The tiled matmul staging its tiles in ``__local`` memory, over run-time rows."""

    compile_options: ClassVar[dict[str, Any]] = {"local_memory": True}


@pytest.mark.parametrize(
    ("spec", "shape", "known"),
    [
        ("a b -> (a b)", (7, 13), {}),
        ("(h d) -> h d", (3,), {"h": 3}),
        ("(a b) -> a b", (4,), {"b": 4}),
        ("a b c -> (a b) c", (1, 3, 5), {}),
    ],
)
def test_views_of_run_time_sizes_merge_and_split(
    spec: str, shape: tuple[int, ...], known: dict[str, int]
) -> None:
    view = ops.rearrange(spec, **known)
    m = view >> ops.softmax(view.graph.values[-1].axes[-1])  # over the view's last axis
    exe = ncd.compile(m, "opencl")
    for k in SIZES:
        sh = (shape[0] * k, *shape[1:])
        _agree(exe, m, _rng(k).standard_normal(sh).astype(np.float32))
    assert exe.builds == 1  # type: ignore[attr-defined]


@pytest.mark.parametrize("local", [False, True])
def test_tiled_matmul_over_a_run_time_contraction(local: bool) -> None:
    """K left free (parameters made for each bound copy): whole float8 steps, then a scalar
    tail; the local-memory tiles zero-pad K instead."""
    m = (ops.linear("d -> e") >> ops.gelu()).over(ncd.Axis("s")).bind(e=24)
    assert [k.style for k in generate(m.graph).kernels] == ["tiled"]
    exe = ncd.compile(m, "opencl", local_memory=local)
    for s, d in ((1, 1), (7, 13), (13, 8), (301, 7), (5, 301)):
        params = ncd.init(m.bind(d=d), seed=d)
        x = _rng(d).standard_normal((s, d)).astype(np.float32)
        x[0, -1] = np.inf if d > 1 else x[0, -1]
        with np.errstate(invalid="ignore", over="ignore"):
            want = ncd.run(m, x, params=params)
        np.testing.assert_allclose(
            exe(x, params=params), want, rtol=2e-4, atol=2e-4, equal_nan=True
        )
    assert exe.builds == 1  # type: ignore[attr-defined]


def test_threads_calling_one_free_size_build_at_different_lengths() -> None:
    import threading

    model = (ops.softmax("x") >> ops.gelu()).over(ncd.Axis("r")).bind(x=37)
    exe = ncd.compile(model, "opencl")
    errors: list[BaseException] = []

    def work(t: int) -> None:
        try:
            for n in (1, 7, 13, 301)[t:] + (1, 7, 13, 301)[:t]:
                x = _rng(n + t).standard_normal((n, 37)).astype(np.float32)
                np.testing.assert_allclose(exe(x), ncd.run(model, x), rtol=1e-5, atol=1e-6)
        except BaseException as e:  # reported below
            errors.append(e)

    threads = [threading.Thread(target=work, args=(t,)) for t in range(3)]
    for th in threads:
        th.start()
    for th in threads:
        th.join()
    assert not errors and exe.builds == 1  # type: ignore[attr-defined]


def test_out_arrays_of_run_time_shapes() -> None:
    model = ops.layernorm("d", affine=False).over(ncd.Axis("r"))
    exe = ncd.compile(model, "opencl")
    for n, d in ((1, 1), (7, 13), (301, 9)):
        x = _rng(n).standard_normal((n, d)).astype(np.float32)
        buf = np.empty((n, d), np.float32)
        assert exe(x, out=buf) is buf
        np.testing.assert_allclose(buf, ncd.run(model, x), rtol=1e-5, atol=1e-5)
    with pytest.raises(ncd.SizeError, match="Fix:"):
        exe(np.ones((3, 4), np.float32), out=np.empty((3, 5), np.float32))


def test_exported_source_of_a_free_size_model_takes_the_sizes() -> None:
    src = ncd.export(nn.transformer_block().bind(d_model=32, heads=2, d_head=16, d_ff=48), "opencl")
    assert "const int n_seq" in src and "get_global_id" in src


@pytest.mark.parametrize("causal", [False, True])
def test_non_finite_scores_through_free_size_attention(causal: bool) -> None:
    att = nn.attention(causal=causal).bind(d=8, v=8)
    exe = ncd.compile(att, "opencl")
    for n in (1, 7, 13, 301):
        rng = _rng(n)
        q, k, v = (rng.standard_normal((n, 8)).astype(np.float32) for _ in range(3))
        k[n // 2, 0] = np.inf  # a key scoring +-inf against every query
        q[0, :] = np.nan if n > 1 else q[0, :]
        with np.errstate(invalid="ignore", over="ignore"):
            want = ncd.run(att, q, k, v)
        np.testing.assert_allclose(exe(q, k, v), want, rtol=2e-4, atol=2e-4, equal_nan=True)
    assert exe.builds == 1  # type: ignore[attr-defined]
