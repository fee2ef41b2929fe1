"""``ncd.plan(model, target="opencl")``: exactly the kernels ncd-opencl renders, its template
tiles recorded as choices; user tiles rendered and run against the reference; bad tiles
refused before any device work."""

from __future__ import annotations

import collections
import sys
from collections.abc import Iterator
from typing import Any

import numpy as np
import pytest

import ncd
from ncd import nn, ops
from ncd.testing import case_by_name
from ncd_opencl.generate import generate

pytest.importorskip("pyopencl")

GPT = nn.gpt(layers=2).bind(seq=64, d_model=64, heads=4, d_head=16, d_ff=128, vocab=97)
CASES = [
    "softmax_13",
    "layernorm",
    "linear_bias_lifted",
    "attention_causal_lifted",
    "spherical_attention",
    "mlp",
    "transformer_block",
    "gpt_2_layers",
]


def _reference(model: Any, *xs: np.ndarray, params: Any = None) -> Any:
    return ncd.run(
        model, *[x.astype(np.float64) if x.dtype == np.float32 else x for x in xs], params=params
    )


def test_acceptance_plan_is_what_perf_prices() -> None:
    ncd_perf = pytest.importorskip("ncd_perf")
    plan = ncd.plan(GPT, target="opencl")
    assert plan.target == "opencl"
    assert len(ncd_perf.cost(GPT, "h100", plan=plan).kernels) == len(plan.kernels)


def test_compile_launches_the_kernels_of_the_plan() -> None:
    plan = ncd.plan(GPT, target="opencl")
    exe = ncd.compile(GPT, "opencl")  # attributes pass through to the OpenCL executable
    params = ncd.init(GPT, seed=0)
    tokens = np.random.default_rng(0).integers(0, 97, 64)
    np.testing.assert_allclose(
        exe(tokens, params=params), _reference(GPT, tokens, params=params), atol=3e-4
    )
    launched = [src.kernel for _, src in exe.compiled(GPT.graph).launches]
    assert len(launched) == len(plan.kernels) == 20
    assert [set(k.nodes) for k in launched] == [set(k.nodes) for k in plan.kernels]
    assert launched == list(plan.kernels)  # partitions and choices too


@pytest.mark.parametrize("name", CASES)
def test_the_recorded_choices_are_the_templates_that_render(name: str) -> None:
    graph = case_by_name(name).model.graph
    plan = ncd.plan(graph, target="opencl")
    gen = generate(graph)
    assert gen.plan.kernels == plan.kernels  # no choice dropped: each template predicted
    assert generate(graph, plan=plan).source == gen.source  # the plan is what renders
    for k, src in zip(plan.kernels, gen.kernels, strict=True):
        kinds = {(p.kind, p.level) for p in k.choices}
        if src.style == "tiled":
            assert ("group", 0) in kinds and ("group", 1) in kinds
        if src.style == "vector":
            assert kinds == {("stream", 1)}


def test_default_choices_are_the_template_constants() -> None:
    plan = ncd.plan(GPT, target="opencl", lanes=8)
    att = next(k for k in plan.kernels if k.streamed)
    x = att.streamed[0]
    seq = next(a for a in att.axes() if a.name == "seq")
    assert att.chosen(x) == 32 and att.chosen(seq, 1) == 4
    mm = next(k for k in plan.kernels if k.name == "k4_linear_binary")
    dm = next(a for a in mm.axes() if a.name == "d_model" and mm.chosen(a) is not None)
    assert (mm.chosen(seq), mm.chosen(dm), mm.chosen(seq, 1), mm.chosen(dm, 1)) == (32, 16, 4, 2)
    ln = plan.kernels[1]
    assert [(p.kind, p.tile, p.level) for p in ln.choices] == [("stream", 8, 1)]


def test_sixteen_lanes_record_the_panel_gemm_tiles() -> None:
    # 8 rows x one 32-column panel per work-item, 16 work-items along the rows (64 rows: 8)
    plan = ncd.plan(GPT, target="opencl", lanes=16)
    mm = next(k for k in plan.kernels if k.name == "k4_linear_binary")
    seq = next(a for a in mm.axes() if a.name == "seq")
    dm = next(a for a in mm.axes() if a.name == "d_model" and mm.chosen(a) is not None)
    assert (mm.chosen(seq), mm.chosen(dm), mm.chosen(seq, 1), mm.chosen(dm, 1)) == (64, 32, 8, 32)
    src = generate(GPT.graph, plan=plan, lanes=16)
    text = next(k.text for k in src.kernels if k.name == "k4_linear_binary")
    assert "float16 c7_1" in text and "pan + k * 32" in text
    assert any(b.panel == 32 for k in src.kernels for b in k.buffers)


@pytest.fixture
def counts(monkeypatch: pytest.MonkeyPatch) -> Iterator[collections.Counter[str]]:
    import ncd.kernel
    import ncd.streaming

    seen: collections.Counter[str] = collections.Counter()
    for name, orig in (
        ("kernel_io", ncd.kernel.kernel_io),
        ("analyse_stream", ncd.streaming.analyse_stream),
    ):

        def wrapped(*a: Any, _orig: Any = orig, _name: str = name, **kw: Any) -> Any:
            seen[_name] += 1
            return _orig(*a, **kw)

        for mod in list(sys.modules.values()):
            if getattr(mod, name, None) is orig and mod.__name__.startswith("ncd"):
                monkeypatch.setattr(mod, name, wrapped)
    yield seen


def test_generating_a_gpt_works_out_kernel_facts_about_once_each(
    counts: collections.Counter[str],
) -> None:
    # before the schedule: 183 kernel_io and 26 analyse_stream calls for these 20 kernels
    gen = generate(GPT.graph)
    n = len(gen.plan.kernels)
    assert n == 20
    assert counts["kernel_io"] <= 2 * n and counts["analyse_stream"] <= n  # now 34 and 20
    counts.clear()
    generate(GPT.graph, plan=gen.plan)  # rendering a plan recomputes none of its facts
    assert counts == {}


# -- tiles= rendered and run ------------------------------------------------------------------


@pytest.mark.parametrize("chunk", [7, 13])
@pytest.mark.parametrize(("nq", "nx"), [(1, 13), (13, 301), (7, 7)])
def test_attention_stream_chunk_and_rows_from_the_plan(chunk: int, nq: int, nx: int) -> None:
    att = nn.attention(causal=False).over("h").bind(h=2, q=nq, x=nx, d=7, v=5)
    tiles: dict[Any, int] = {"x": min(chunk, nx)}
    if nq > 1:  # a single query row has no rows to block
        tiles["q", 1] = 3
    plan = ncd.plan(att, target="opencl", tiles=tiles)
    (k,) = plan.kernels
    assert k.chosen(k.streamed[0]) == min(chunk, nx)
    src = generate(att.graph, plan=plan).kernels[0]
    assert f"+= {min(chunk, nx)})" in src.text  # the chunk loop steps by the chosen tile
    rng = np.random.default_rng(nq * nx)
    q, kk, v = (
        rng.standard_normal(s).astype(np.float32) for s in ((2, nq, 7), (2, nx, 7), (2, nx, 5))
    )
    q[0, 0, 0] = np.nan  # non-finite inputs propagate as in the reference
    kk[1, -1, 2] = np.inf
    got = ncd.compile(att, "opencl", plan=plan)(q, kk, v)
    np.testing.assert_allclose(got, _reference(att, q, kk, v), rtol=2e-4, atol=2e-4)


@pytest.mark.parametrize(("s", "e"), [(7, 7), (13, 13), (301, 13)])
def test_matmul_work_group_tile_from_the_plan(s: int, e: int) -> None:
    # (1 row is below the tiled template's 4 rows per work-item: the pointwise renderer runs)
    rows = ncd.Axis("s", size=s)
    lin = (ops.linear("d -> e", d=16, e=e) >> ops.gelu()).over(rows)
    # 16 rows a group, or as many (whole work-items of 4) as there are rows: a tile may not pass
    # the rows by more than the template's default group does
    tall = min(16, 4 * -(-s // 4))
    plan = ncd.plan(lin, target="opencl", tiles={("s", 0): tall, ("e", 0): 4})
    gen = generate(lin.graph, plan=plan)
    (src,) = gen.kernels
    # (columns, rows) of work-items
    assert src.style == "tiled" and src.local_size == (2, tall // 4)
    assert f"reqd_work_group_size(2, {tall // 4}, 1)" in src.text
    default = generate(lin.graph)
    # 8 x 8 work-items, no taller than the rows need (4 per work-item), wider where e allows
    tall = min(8, -(-s // 4))
    assert default.kernels[0].local_size == (max(8, min(64 // tall, -(-e // 2))), tall)
    params = ncd.init(lin, seed=1)
    x = np.random.default_rng(s).standard_normal((s, 16)).astype(np.float32)
    x[0, 3] = np.inf
    got = ncd.compile(lin, "opencl", plan=plan)(x, params=params)
    np.testing.assert_allclose(got, _reference(lin, x, params=params), rtol=2e-4, atol=2e-4)


def test_gpt_with_user_tiles_runs_like_the_reference() -> None:
    plan = ncd.plan(GPT, target="opencl", tiles={"seq_k": 13, ("k*_linear*", "seq", 0): 8})
    assert plan.kernels[5].chosen(plan.kernels[5].streamed[0]) == 13
    params = ncd.init(GPT, seed=2)
    tokens = np.random.default_rng(2).integers(0, 97, 64)
    got = ncd.compile(GPT, "opencl", plan=plan)(tokens, params=params)
    np.testing.assert_allclose(got, _reference(GPT, tokens, params=params), atol=3e-4)


@pytest.mark.parametrize(
    ("tiles", "match"),
    [
        ({("k4_*", "seq", 1): 2}, r"4 rows x 2 columns per work-item only.*Fix:"),
        ({("k4_*", "seq", 0): 6}, r"work-group tile of 6 rows.*no multiple of the 4.*Fix:"),
        ({("k4_*", "seq", 0): 64, ("k4_*", "d_model", 0): 64}, r"at most 256.*Fix:"),
        ({("k1_layernorm", "d_model", 1): 4}, r"float8 vectors only.*Fix:"),
        ({"seq_k": 65}, r"does not fit seq_k#\w+ \(64\).*Fix:"),
        ({"no_such_axis": 8}, r"matches no tile the plan chose.*Fix:"),
    ],
)
def test_tiles_a_template_cannot_render_are_refused(tiles: dict[Any, int], match: str) -> None:
    with pytest.raises(ncd.ScheduleError, match=match):
        ncd.plan(GPT, target="opencl", tiles=tiles, lanes=8)


@pytest.mark.parametrize(
    ("tiles", "match"),
    [
        ({("k4_*", "seq", 1): 4}, r"8 rows x 32 columns per work-item only.*Fix:"),
        ({("k4_*", "seq", 0): 12}, r"work-group tile of 12 rows.*no multiple of the 8.*Fix:"),
    ],
)
def test_panel_tiles_it_cannot_render_are_refused(tiles: dict[Any, int], match: str) -> None:
    with pytest.raises(ncd.ScheduleError, match=match):
        ncd.plan(GPT, target="opencl", tiles=tiles, lanes=16)


def test_a_width_other_than_8_or_16_is_refused() -> None:
    with pytest.raises(ncd.ScheduleError, match=r"lanes=4.*8 or 16.*Fix:"):
        ncd.plan(GPT, target="opencl", lanes=4)
    with pytest.raises(ncd.ScheduleError, match=r"lanes=True.*Fix:"):
        ncd.compile(GPT, "opencl", lanes=True)


def test_private_scores_of_the_chunked_attention_are_bounded() -> None:
    att = nn.attention().bind(q=32, x=301, d=8, v=8)
    with pytest.raises(ncd.ScheduleError, match=r"9632 scores.*at most 4096.*Fix:"):
        ncd.plan(att, target="opencl", tiles={"x": 301, ("q", 1): 32})


def test_a_plan_is_rendered_only_for_its_graph_and_target() -> None:
    import attrs

    other = nn.gpt(layers=2).bind(seq=32, d_model=64, heads=4, d_head=16, d_ff=128, vocab=97)
    plan = ncd.plan(other, target="opencl")
    with pytest.raises(ncd.ScheduleError, match=r"another graph.*Fix:"):
        generate(GPT.graph, plan=plan)
    with pytest.raises(ncd.ScheduleError, match=r"target 'cuda'.*Fix:"):
        generate(other.graph, plan=attrs.evolve(plan, target="cuda"))
    with pytest.raises(ncd.ScheduleError, match="tiles belong to the plan"):
        generate(other.graph, plan=plan, tiles={"seq_k": 8})
    own = ncd.plan(other)  # ncd's own plan renders with the templates' defaults
    assert len(generate(other.graph, plan=own).kernels) == len(own.kernels)


def test_plan_options_and_unknown_ones() -> None:
    assert len(ncd.plan(GPT, target="opencl", fuse=False).kernels) == len(GPT.graph.nodes)
    plain = ncd.plan(GPT, target="opencl", tiled=False)
    assert not any(("group", 0) in {(p.kind, p.level) for p in k.choices} for k in plain.kernels)
    with pytest.raises(ncd.ScheduleError, match=r"unknown option.*Fix:"):
        ncd.plan(GPT, target="opencl", device="0:0")
