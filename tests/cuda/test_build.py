"""ncd_cuda.build: every conformance model through CUDA C -> PTX -> cubin for sm_80 and sm_90.

Golden CUDA sources: regenerate with ``NCD_UPDATE_GOLDEN=1 pytest tests/cuda/test_build.py`` and
review the diff.
"""

from __future__ import annotations

import os
import pathlib
import re

import pytest

import ncd
import ncd_cuda
from ncd import nn, ops
from ncd.errors import ScheduleError
from ncd.testing import case_by_name, cases
from ncd_cuda.generate import generate

GOLDEN = pathlib.Path(__file__).parent / "golden"
GOLDEN_CASES = ["softmax_13", "layernorm", "attention_causal_lifted", "mlp", "gpt_2_layers"]
OPENCL_TOKENS = re.compile(r"__kernel\b|__global\b|__local\b|get_global_id|barrier\(|\bfloat8\b")


@pytest.mark.parametrize("arch", ["sm_80", "sm_90"])
@pytest.mark.parametrize("name", [c.name for c in cases()])
def test_every_conformance_model_compiles_without_spills(name: str, arch: str) -> None:
    b = ncd_cuda.build(case_by_name(name).model, arch=arch)
    assert b.arch == arch and b.kernels
    assert not OPENCL_TOKENS.search(b.source), "OpenCL syntax in a CUDA program"
    for k in b.kernels:
        assert f".entry {k.name}(" in k.ptx and k.cubin[:4] == b"\x7fELF"
        assert k.resources.registers > 0, f"no ptxas report for {k.name}"
        assert k.resources.spills == 0, f"{k.name} spills: {k.resources}"
    # every launch names a compiled function
    assert {s.name for s in b.launches} <= {k.name for k in b.kernels}


@pytest.mark.parametrize("name", GOLDEN_CASES)
def test_generated_cuda_matches_golden(name: str) -> None:
    text = generate(case_by_name(name).model.graph).source
    path = GOLDEN / f"{name}.cu"
    if os.environ.get("NCD_UPDATE_GOLDEN") == "1":
        path.parent.mkdir(exist_ok=True)
        path.write_text(text)
    assert path.exists(), f"no golden file {path}; run with NCD_UPDATE_GOLDEN=1 to create it"
    assert text == path.read_text(), f"{name}: generated source changed (NCD_UPDATE_GOLDEN=1)"


@pytest.mark.parametrize("causal", [True, False])
@pytest.mark.parametrize("d", [64, 128])
def test_streamed_attention_keeps_its_rows_in_registers(d: int, causal: bool) -> None:
    att = nn.attention(causal=causal).over("h").bind(h=4, q=1000, x=1000, d=d, v=d)
    for arch in ("sm_80", "sm_90"):
        (k,) = ncd_cuda.build(att, arch=arch).kernels
        assert k.style == "streamed" and k.resources.spills == 0
        assert k.launch.local_size == (128,)  # one query row per thread, 4 warps a block
        assert k.launch.global_size[0] >= 4 * 1000


@pytest.mark.parametrize("fmt", [ncd.float16, ncd.bfloat16, ncd.float64])
def test_other_formats_compile(fmt: object) -> None:
    model = case_by_name("transformer_block").model.cast(fmt)
    b = ncd_cuda.build(model, arch="sm_80")
    assert all(k.resources.spills == 0 for k in b.kernels)
    if fmt in (ncd.float16, ncd.bfloat16):
        assert "unsigned short*" in b.source and "cvt.rn." in b.source
        assert "#include" not in b.source  # NVRTC needs no toolkit headers


def test_layers_share_one_function() -> None:
    gpt = nn.gpt(layers=3).bind(seq=13, d_model=32, heads=4, d_head=8, d_ff=64, vocab=50)
    b = ncd_cuda.build(gpt, arch="sm_90")
    assert len(b.launches) > len(b.kernels)  # later layers launch the first layer's kernels
    assert len({k.name for k in b.kernels}) == len(b.kernels)


def test_names_reach_cuda_sanitised() -> None:
    r = ncd.Axis("r; system(1)", size=7)
    model = ops.softmax(r)
    b = ncd_cuda.build(model, arch="sm_90")
    code = [ln for ln in b.source.splitlines() if not ln.lstrip().startswith("//")]
    assert not any("r; system" in ln for ln in code)
    assert "system(1)" not in b.source  # comments are sanitised too
    for k in b.kernels:
        assert re.fullmatch(r"[A-Za-z_]\w*", k.name)


def test_the_build_renders_the_cuda_plan() -> None:
    att = nn.attention().bind(q=301, x=301, d=64, v=64)
    b = ncd_cuda.build(att, arch="sm_90")
    assert b.plan.target == "cuda"
    assert [k.name for k in b.plan.kernels] == [s.kernel.name for s in b.launches]
    assert any(p.kind == "stream" and p.tile == 16 for p in b.plan.kernels[0].choices)
    # the streamed attention takes its key chunk from the plan
    chunked = ncd.plan(att, target="cuda", tiles={("x", 0): 32})
    assert "stream(x/32@L0)" in {str(p) for p in chunked.kernels[0].choices}
    with pytest.raises(ScheduleError, match="key chunk"):
        ncd.plan(att, target="cuda", tiles={("x", 0): 128})


@pytest.mark.parametrize(("bm", "bn"), [(128, 32), (32, 64), (16, 16), (128, 128)])
def test_the_cuda_core_matmul_takes_its_block_tile_from_the_plan(bm: int, bn: int) -> None:
    mm = ops.einsum("a b, b c -> a c").bind(a=130, b=40, c=300)
    plan = ncd.plan(mm, target="cuda", tiles={("a", 0): bm, ("c", 0): bn})
    (k,) = ncd_cuda.build(mm, arch="sm_90", plan=plan).kernels
    threads = (bm // 4) * (bn // 4)
    assert k.style == "simt" and f"__launch_bounds__({threads})" in k.source
    assert k.resources.spill_stores == 0 and k.resources.registers <= 64


@pytest.mark.parametrize(
    ("tiles", "match"),
    [
        ({("a", 0): 6}, "multiples of 4"),
        ({("a", 1): 2}, "per thread"),
        ({("a", 0): 128, ("c", 0): 256}, "at most 1024"),
    ],
)
def test_tiles_the_cuda_core_matmul_cannot_render_are_refused(tiles: dict, match: str) -> None:
    mm = ops.einsum("a b, b c -> a c").bind(a=130, b=40, c=300)
    with pytest.raises(ScheduleError, match=match):
        ncd.plan(mm, target="cuda", tiles=tiles)


def test_tensor_core_tiles_are_fixed() -> None:
    mm = ops.einsum("a b, b c -> a c").bind(a=130, b=40, c=300).cast(ncd.bfloat16)
    with pytest.raises(ScheduleError, match="mma template renders its own tiles"):
        ncd.plan(mm, target="cuda", tiles={("a", 0): 128})


def test_unknown_arch_is_refused_before_any_work() -> None:
    with pytest.raises(ncd.NcdError, match="sm_70"):
        ncd_cuda.build(ops.softmax("x").bind(x=7), arch="sm_70")


def test_awkward_sizes_compile() -> None:
    for n in (1, 7, 13, 301):
        model = ops.einsum("a b, b c -> a c").bind(a=n, b=13, c=7)
        b = ncd_cuda.build(model, arch="sm_80")
        assert b.kernels and all(k.resources.spills == 0 for k in b.kernels)


@pytest.mark.parametrize("fmt, ty", [(ncd.bfloat16, "bf16"), (ncd.float16, "f16")])
@pytest.mark.parametrize("arch", ["sm_80", "sm_90"])
def test_16_bit_contractions_run_on_tensor_cores(fmt: object, ty: str, arch: str) -> None:
    mm = ops.einsum("a b, b c -> a c").bind(a=1000, b=768, c=3072).cast(fmt)
    (k,) = ncd_cuda.build(mm, arch=arch).kernels
    assert k.style == "mma" and k.resources.spills == 0
    assert re.search(rf"\bmma\.sync\.aligned\.m16n8k16\.row\.col\.f32\.{ty}\.{ty}\.f32", k.ptx)
    assert k.launch.local_size == (128,) and k.resources.shared_bytes == 2 * 64 * 40 * 2


def test_a_linear_with_its_epilogue_runs_on_tensor_cores() -> None:
    mlp = case_by_name("mlp").model.cast(ncd.bfloat16)
    b = ncd_cuda.build(mlp, arch="sm_90")
    styles = [k.style for k in b.kernels]
    assert styles.count("mma") >= 1, styles
    for k in b.kernels:
        assert k.resources.spills == 0
        if k.style == "mma":
            assert "mma.sync" in k.ptx


@pytest.mark.parametrize("n", [1, 7, 13, 301])
def test_tensor_core_tiles_mask_awkward_sizes(n: int) -> None:
    mm = ops.einsum("a b, b c -> a c").bind(a=n, b=13, c=n + 6).cast(ncd.float16)
    (k,) = ncd_cuda.build(mm, arch="sm_80").kernels
    assert k.style == "mma"
    assert f"* 8) < {n} && (n0 + " in k.source and f"r % 2) < {n + 6})" in k.source
    assert "gk < 13" in k.source


def test_float32_and_float64_products_run_on_cuda_cores_without_spills() -> None:
    # float32: at most 64 registers, so 4 blocks of 256 threads fit an SM's 64K registers
    for fmt, most in ((ncd.float32, 64), (ncd.float64, 128)):
        mm = ops.einsum("a b, b c -> a c").bind(a=1000, b=768, c=301).cast(fmt)
        (k,) = ncd_cuda.build(mm, arch="sm_90").kernels
        assert k.style == "simt"
        assert k.resources.spill_stores == 0 and k.resources.spill_loads == 0
        assert k.resources.registers <= most
    (k,) = ncd.plan(mm, target="cuda").kernels
    tiles = sorted((p.axis.name, p.tile, p.level) for p in k.choices)
    assert tiles == [("a", 4, 1), ("a", 64, 0), ("c", 4, 1), ("c", 64, 0)]
    free = ops.linear("d", "e").over("s").bind(d=24, e=40)  # s left to run time
    assert [k.style for k in ncd_cuda.build(free, arch="sm_80").kernels] == ["simt"]


def test_batched_products_stay_on_the_pointwise_renderer() -> None:
    batched = ops.einsum("h a b, h b c -> h a c").bind(h=2, a=64, b=64, c=64).cast(ncd.float16)
    assert [k.style for k in ncd_cuda.build(batched, arch="sm_80").kernels] == ["pointwise"]


def test_ncd_cuda_inspect_prints_every_kernel(
    tmp_path: pathlib.Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from ncd.cli import main

    sizes = ["seq=13", "d_model=32", "heads=4", "d_head=8", "d_ff=64", "vocab=50"]
    argv = ["cuda", "inspect", "gpt", "--arch", "sm_80", "--emit", str(tmp_path), "--bind"]
    assert main([*argv, *sizes]) == 0
    out = capsys.readouterr().out
    assert "CUDA kernels" in out and "sm_80" in out and "regs" in out
    assert [p.suffix for p in tmp_path.iterdir()].count(".cubin") >= 5


def test_the_plan_records_the_tensor_core_tiles_it_renders() -> None:
    mm = ops.einsum("a b, b c -> a c").bind(a=1000, b=768, c=3072).cast(ncd.bfloat16)
    (k,) = ncd.plan(mm, target="cuda").kernels
    tiles = sorted((p.axis.name, p.tile, p.level) for p in k.choices)
    assert tiles == [("a", 32, 1), ("a", 64, 0), ("c", 32, 1), ("c", 64, 0)]
    b = ncd_cuda.build(mm, arch="sm_90")
    assert b.kernels[0].style == "mma" and b.plan.kernels[0].choices == k.choices
    # a 64-bit build renders pointwise: the plan it reports claims no tiles
    wide = ncd_cuda.build(mm, arch="sm_90", wide=True)
    assert wide.kernels[0].style == "pointwise" and wide.plan.kernels[0].choices == ()


@pytest.mark.parametrize(
    "make",
    [
        lambda: ops.layernorm("d").over("r"),
        lambda: ops.softmax("d").over("r"),
        lambda: ops.rmsnorm("d").over("r"),
        lambda: ops.reduce("max", "d").over("r"),
    ],
    ids=["layernorm", "softmax", "rmsnorm", "max"],
)
@pytest.mark.parametrize("d", [64, 301, 768])
def test_long_rows_take_a_warp_each(make: object, d: int) -> None:
    model = make().bind(r=13, d=d)  # type: ignore[operator]
    (k,) = ncd_cuda.build(model, arch="sm_80").kernels
    assert k.style == "lanes" and k.resources.spills == 0
    assert "__shfl_xor_sync(0xffffffffu" in k.source
    assert "+= 32)" in k.source and "if (gid >= 416) return;" in k.source  # 13 rows x 32
    assert "shfl.sync.bfly" in k.ptx


def test_a_row_reduction_is_stored_by_one_lane() -> None:
    (k,) = ncd_cuda.build(ops.reduce("sum", "d").over("r").bind(r=7, d=300), arch="sm_90").kernels
    assert k.style == "lanes" and "if (lane == 0)" in k.source


def test_short_rows_and_contractions_keep_a_thread_per_row() -> None:
    (k,) = ncd_cuda.build(ops.softmax("d").over("r").bind(r=7, d=13), arch="sm_80").kernels
    assert k.style == "pointwise"
    mm = ops.einsum("a b, b c -> a c").bind(a=7, b=300, c=5)  # a contraction: the matmul's
    assert [k.style for k in ncd_cuda.build(mm, arch="sm_80").kernels] == ["simt"]


@pytest.mark.parametrize("fmt, ty", [(ncd.bfloat16, "bf16"), (ncd.float16, "f16")])
@pytest.mark.parametrize("d", [64, 128])
def test_16_bit_attention_runs_on_tensor_cores(fmt: object, ty: str, d: int) -> None:
    for causal in (False, True):
        att = nn.attention(causal=causal).over("h").bind(h=4, q=1000, x=1000, d=d, v=d).cast(fmt)
        plan = ncd.plan(att, target="cuda")
        (k,) = ncd_cuda.build(att, arch="sm_80").kernels
        assert k.style == "flash" and k.resources.spills == 0
        assert re.search(rf"\bmma\.sync\.aligned\.m16n8k16\.row\.col\.f32\.{ty}\.{ty}\.f32", k.ptx)
        assert "shfl.sync.bfly" in k.ptx  # the row statistics over a quad of lanes
        tiles = sorted((p.kind, p.tile, p.level) for p in plan.kernels[0].choices)
        assert tiles == [("group", 16, 1), ("group", 64, 0), ("stream", 64, 0)]


@pytest.mark.parametrize("fmt", [ncd.float32, ncd.bfloat16], ids=["simt", "mma"])
def test_matmul_epilogues_read_only_inside_the_bounds_guard(fmt: object) -> None:
    """A bias + activation epilogue at a masked position (past N) must not read the bias: its
    value is computed inside the guard, not hoisted above it (an out-of-bounds read)."""
    model = (ops.linear("d", "e").over("s") >> ops.unary("gelu")).bind(s=13, d=16, e=7)
    (k,) = ncd_cuda.build(model.cast(fmt), arch="sm_80").kernels  # type: ignore[arg-type]
    epilogue = k.source[k.source.rindex("for (int r = 0; r <") :]
    guard = epilogue.index("if (")
    assert "w_linear_bias" in epilogue
    assert epilogue.index("w_linear_bias") > guard
