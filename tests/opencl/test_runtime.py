"""Runtime behaviour: fused kernel counts, streamed attention, caches, errors, options."""

from __future__ import annotations

import numpy as np
import pytest

import ncd
from ncd import nn, ops
from ncd.plugins import registry
from ncd_opencl import program
from ncd_opencl.generate import generate

pytest.importorskip("pyopencl")


def _check(model, *xs, params=None, tol=2e-4):
    got = ncd.compile(model, "opencl")(*xs, params=params)
    want = ncd.run(
        model, *[x.astype(np.float64) if x.dtype == np.float32 else x for x in xs], params=params
    )
    np.testing.assert_allclose(got, want, rtol=tol, atol=tol)


@pytest.mark.parametrize("n", [1, 7, 13, 100])
def test_attention_is_one_streamed_kernel(n: int) -> None:
    att = nn.attention(causal=True).over("h").bind(h=2, q=n, x=n, d=7, v=5)
    gen = generate(att.graph)
    assert [k.style for k in gen.kernels] == ["streamed"]
    rng = np.random.default_rng(n)
    q, k, v = (rng.standard_normal(s).astype(np.float32) for s in ((2, n, 7), (2, n, 7), (2, n, 5)))
    _check(att, q, k, v)


@pytest.mark.parametrize("n", [1, 13, 100])
def test_spherical_attention_streams_the_l2_normaliser(n: int) -> None:
    att = nn.spherical_attention(causal=True).bind(q=n, x=n, d=5, v=3)
    gen = generate(att.graph)
    assert len(gen.kernels) == 1 and gen.kernels[0].style == "streamed"
    text = gen.kernels[0].text
    assert "rsqrt" in text and "exp(" not in text
    rng = np.random.default_rng(0)
    xs = [rng.standard_normal(s).astype(np.float32) for s in ((n, 5), (n, 5), (n, 3))]
    _check(att, *xs)


def test_gpt_is_a_small_number_of_kernels() -> None:
    gpt = nn.gpt(layers=2).bind(seq=13, d_model=16, heads=2, d_head=8, d_ff=24, vocab=11)
    gen = generate(gpt.graph)
    # per layer: ln_1, q, k, v, attention, o+add, ln_2, fc+gelu, proj+add; plus the ends
    assert len(gen.kernels) <= 9 * 2 + 3 < len(gpt.graph.nodes)
    tokens = np.arange(13) % 11
    params = ncd.init(gpt, seed=3)
    _check(gpt, tokens, params=params)


def test_linear_gelu_epilogue_is_fused() -> None:
    m = (ops.linear("d -> e", d=13, e=29) >> ops.gelu()).over(ncd.Axis("s", size=7))
    gen = generate(m.graph)
    assert len(gen.kernels) == 1 and "erf(" in gen.source
    x = np.random.default_rng(1).standard_normal((7, 13)).astype(np.float32)
    _check(m, x, params=ncd.init(m))


def test_free_sizes_are_read_from_inputs_and_cached_per_shape() -> None:
    m = ops.softmax(ncd.Axis("x")).over(ncd.Axis("r"))
    exe = ncd.compile(m, "opencl")
    for shape in ((3, 5), (1, 1), (3, 5)):
        x = np.random.default_rng(0).standard_normal(shape).astype(np.float32)
        np.testing.assert_allclose(exe(x), ncd.run(m, x), rtol=1e-5, atol=1e-6)
    # free sizes are kernel arguments: one build, intermediates kept per size set
    assert exe.builds == 1 and len(exe._built) == 1
    assert len(next(iter(exe._built.values()))._sized) == 2


def test_programs_are_cached_in_memory_and_on_disk(tmp_path, monkeypatch) -> None:
    monkeypatch.setenv("NCD_OPENCL_CACHE", str(tmp_path))
    src = "__kernel void twice(__global float* a) { a[get_global_id(0)] *= 2.0f; }\n"
    before = dict(program.STATS)
    p1 = program.build(src)
    p2 = program.build(src)
    assert p1 is p2 and program.STATS["memory_hits"] == before["memory_hits"] + 1
    assert list(tmp_path.glob("*.bin")), "the built binary is stored on disk"
    program._PROGRAMS.clear()
    program.build(src)
    assert program.STATS["disk_hits"] == before["disk_hits"] + 1


def test_compile_error_shows_the_source_around_the_line() -> None:
    src = "__kernel void broken(__global float* a) {\n  a[0] = undefined_name;\n}\n"
    with pytest.raises(ncd.CompileError) as e:
        program.build(src)
    text = str(e.value)
    assert "undefined_name" in text and ">   2 |" in text


def test_unknown_device_is_a_target_error() -> None:
    with pytest.raises(ncd.TargetNotFoundError, match="no OpenCL device matches"):
        program.get_context("no-such-device-anywhere")


def test_device_option_by_name() -> None:
    m = ops.relu().over(ncd.Axis("r", size=7))
    x = np.linspace(-1, 1, 7).astype(np.float32)
    np.testing.assert_array_equal(ncd.compile(m, "opencl", device="pthread")(x), np.maximum(x, 0))


def test_missing_params_raise_parameter_error() -> None:
    m = ops.linear("d -> e", d=3, e=2)
    with pytest.raises(ncd.ParameterError):
        ncd.compile(m, "opencl")(np.ones(3, np.float32))


def test_export_gives_source_without_a_device() -> None:
    text = ncd.export(ops.softmax(ncd.Axis("x", size=4)), "opencl")
    assert "__kernel void" in text


def test_a_lowering_registered_for_opencl_is_used() -> None:
    import attrs

    from ncd.op import Op, register_op
    from ncd.plugins.interfaces import Lowering
    from ncd.reference import REFERENCE_RULES

    @register_op
    @attrs.frozen
    class Twice(Op):
        kind = "test_opencl_twice"
        category = "elementwise"

        def signature(self):
            return ((),), ((),)

    REFERENCE_RULES[Twice] = lambda op, xs, p, ctx: [xs[0] * 2]
    reg = registry()
    reg.lowerings[("opencl", "test_opencl_twice")] = Lowering(
        "opencl", "test_opencl_twice", lambda g, n, i: f"(2.0f * {g.load(n.inputs[0], i)})"
    )
    try:
        m = ops.prim(Twice()).over(ncd.Axis("r", size=7))
        x = np.arange(7, dtype=np.float32)
        np.testing.assert_array_equal(ncd.compile(m, "opencl")(x), 2 * x)
    finally:
        del reg.lowerings[("opencl", "test_opencl_twice")]


@pytest.mark.parametrize(("m", "k", "n"), [(1, 8, 1), (13, 16, 7), (100, 24, 13), (7, 13, 5)])
def test_tiled_linear_with_epilogue_any_size(m: int, k: int, n: int) -> None:
    s = ncd.Axis("s", size=m)
    model = (ops.linear("d -> h e", d=k, h=1, e=n) >> ops.gelu()).over(s)
    gen = generate(model.graph)
    assert gen.kernels[0].style == ("tiled" if k % 8 == 0 and m >= 4 and n >= 2 else "pointwise")
    x = np.random.default_rng(m).standard_normal((m, k)).astype(np.float32)
    _check(model, x, params=ncd.init(model))


@pytest.mark.parametrize("n", [1, 7, 13, 100])
def test_chunked_stream_handles_tails(n: int) -> None:
    att = nn.attention().bind(q=3, x=n, d=8, v=5)
    src = generate(att.graph).source
    assert "sc[" in src or n < 2
    rng = np.random.default_rng(n)
    xs = [rng.standard_normal(s).astype(np.float32) for s in ((3, 8), (n, 8), (n, 5))]
    _check(att, *xs)


@pytest.mark.parametrize(
    "build",
    [
        lambda r, c: ops.softmax(c).over(r),
        lambda r, c: (ops.softmax(c) >> ops.mul(2.0) >> ops.gelu()).over(r),
        lambda r, c: ops.layernorm(c).over(r),
        lambda r, c: (ops.rmsnorm(c) >> ops.silu()).over(r),
        lambda r, c: ops.l2norm(c).over(r),
        lambda r, c: ops.max(c).over(r),
        lambda r, c: ops.mean(c).over(r),
    ],
)
@pytest.mark.parametrize("rows", [1, 7, 13])
def test_vector_rows(build, rows: int) -> None:
    r, c = ncd.Axis("r", size=rows), ncd.Axis("c", size=24)
    model = build(r, c)
    gen = generate(model.graph)
    assert gen.kernels[0].style == "vector" and "float8" in gen.source
    x = np.random.default_rng(rows).standard_normal((rows, 24)).astype(np.float32)
    params = ncd.init(model, seed=2)
    _check(model, x, params=params or None)


@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize("nq,nx", [(1, 40), (7, 7), (13, 70), (37, 100), (33, 64)])
@pytest.mark.parametrize("spherical", [False, True])
def test_streamed_rows_and_vectors(causal: bool, nq: int, nx: int, spherical: bool) -> None:
    """Several query rows per work-item (the last ones clamped at awkward sizes), vector
    accumulators along v (16: a vector multiple), chunks with tails, causal limits."""
    make = nn.spherical_attention if spherical else nn.attention
    att = make(causal=causal).over("h").bind(h=3, q=nq, x=nx, d=8, v=16)
    gen = generate(att.graph)
    assert [k.style for k in gen.kernels] == ["streamed"]
    if nq >= 2:
        assert "i_q_1" in gen.source  # a second row per work-item
    assert "ncd_float8u" in gen.source  # vector loads of V
    rng = np.random.default_rng(nq * nx)
    xs = [rng.standard_normal(s).astype(np.float32) for s in ((3, nq, 8), (3, nx, 8), (3, nx, 16))]
    _check(att, *xs)


@pytest.mark.parametrize(("m", "k", "n"), [(4, 8, 2), (13, 40, 7), (100, 72, 37), (33, 32, 17)])
def test_tiled_linear_staged_in_local_memory(m: int, k: int, n: int) -> None:
    """The __local staging variant (the default on GPUs) on PoCL: group tiles of 32 rows x 16
    columns, K in chunks of 32 with a zero-filled tail, clamped rows and columns."""
    s = ncd.Axis("s", size=m)
    model = (ops.linear("d -> e", d=k, e=n) >> ops.gelu()).over(s)
    gen = generate(model.graph, local=True)
    assert gen.kernels[0].style == "tiled" and "__local float xs" in gen.source
    assert "barrier(CLK_LOCAL_MEM_FENCE)" in gen.source
    assert "__local" not in generate(model.graph).source  # CPUs: cache-blocked, no staging
    x = np.random.default_rng(m).standard_normal((m, k)).astype(np.float32)
    params = ncd.init(model)
    got = ncd.compile(model, "opencl", local_memory=True)(x, params=params)
    np.testing.assert_allclose(
        got, ncd.run(model, x.astype(np.float64), params=params), rtol=2e-4, atol=2e-4
    )


@pytest.mark.parametrize("bias", [True, False])
@pytest.mark.parametrize("m", [5, 13])
def test_tiled_activation_chain_runs_on_packed_vectors(bias: bool, m: int) -> None:
    """An epilogue mapping each element alone is evaluated once per work-item on the packed
    float8 of its 4x2 sums; lanes outside the output are not written."""
    s = ncd.Axis("s", size=m)
    chain = ops.silu() >> ops.mul(3.0) >> ops.relu() >> ops.gelu()
    model = (ops.linear("d -> e", d=16, e=13, bias=bias) >> chain).over(s)
    gen = generate(model.graph)
    assert gen.kernels[0].style == "tiled" and "float8 pv" in gen.source
    x = np.random.default_rng(m).standard_normal((m, 16)).astype(np.float32)
    _check(model, x, params=ncd.init(model))


def test_tiled_residual_epilogue_stays_per_element() -> None:
    """An epilogue that reads another array (a residual) keeps the per-element path."""
    ax = {n: ncd.Axis(n) for n in ("seq", "d_model", "heads", "d_head", "d_ff", "seq_k")}
    block = nn.transformer_block(
        ax["seq"], ax["d_model"], ax["heads"], ax["d_head"], ax["d_ff"], seq_k=ax["seq_k"]
    )
    block = block.bind(seq=9, d_model=16, heads=2, d_head=8, d_ff=24)
    gen = generate(block.graph)
    assert any("float8 pv" in k.text for k in gen.kernels)  # the MLP's fc + GELU
    assert any(
        k.style == "tiled" and k.text and "float8 pv" not in k.text for k in gen.kernels
    )  # projections adding the residual
    x = np.random.default_rng(1).standard_normal((9, 16)).astype(np.float32)
    _check(block, x, params=ncd.init(block))


@pytest.mark.parametrize("cols", [24, 13])
def test_elementwise_chain_runs_in_vector_mode(cols: int) -> None:
    """A chain with no reduction vectorises along its output's unit-stride axis (scalar when
    that axis is not a multiple of the vector width)."""
    r, c = ncd.Axis("r", size=7), ncd.Axis("c", size=cols)
    model = (ops.mul(2.0) >> ops.gelu() >> ops.add(1.0) >> ops.tanh()).over(r).over(c)
    gen = generate(model.graph)
    assert gen.kernels[0].style == ("vector" if cols % 8 == 0 else "pointwise")
    x = np.random.default_rng(cols).standard_normal((7, cols)).astype(np.float32)
    _check(model, x)


def test_softmax_keeps_its_exponentials_in_the_output() -> None:
    """A softmax whose value the kernel writes and nothing else reads stores exp(x - max)
    in the output during the sum pass and rescales it in place: one exp per element."""
    r, c = ncd.Axis("r", size=5), ncd.Axis("c", size=40)
    alone = generate(ops.softmax(c).over(r).graph).kernels[0].text
    assert alone.count("exp(") == 1
    then = ops.softmax(c) >> ops.mul(3.0)
    fused = generate(then.over(r).graph, fuse="local").kernels
    assert len(fused) == 1 and fused[0].text.count("exp(") == 2  # read in-kernel: recomputed
    x = np.random.default_rng(3).standard_normal((5, 40)).astype(np.float32)
    got = ncd.compile(then.over(r), "opencl", fuse="local")(x)
    np.testing.assert_allclose(got, ncd.run(then.over(r), x), rtol=1e-5, atol=1e-6)
    _check(ops.softmax(c).over(r), x)
    _check((ops.softmax(c) >> ops.mul(3.0)).over(r), x)


@pytest.mark.parametrize("cols", [24, 13])
@pytest.mark.parametrize("norm", [ops.softmax, ops.layernorm, ops.rmsnorm])
def test_normaliser_with_fused_activation(norm, cols: int) -> None:  # type: ignore[no-untyped-def]
    r, c = ncd.Axis("r", size=7), ncd.Axis("c", size=cols)
    model = (norm(c) >> ops.gelu() >> ops.mul(2.0)).over(r)
    gen = generate(model.graph)
    assert len(gen.kernels) == 1
    x = np.random.default_rng(cols).standard_normal((7, cols)).astype(np.float32)
    params = ncd.init(model, seed=1)
    _check(model, x, params=params or None)
