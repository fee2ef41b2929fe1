"""The compile stages: CUDA C -> PTX -> cubin with NVRTC and nvcc, ptxas's report, failures."""

from __future__ import annotations

import shutil

import pytest

from ncd.errors import CompileError, DefinitionError, NcdError
from ncd_cuda import stages
from ncd_cuda.stages import CudaToolchainError, compile_source, parse_ptxas_report

KERNEL = """
extern "C" __global__ void __launch_bounds__(128) scale_rows(const float* __restrict__ x,
                                                             float* __restrict__ y, int n) {
    __shared__ float tile[256];
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    tile[threadIdx.x] = i < n ? x[i] : 0.0f;
    __syncthreads();
    if (i < n) y[i] = 2.0f * tile[threadIdx.x ^ 1];
}
"""

COMPILERS = stages.available_compilers()
needs_nvcc = pytest.mark.skipif("nvcc" not in COMPILERS, reason="nvcc/ptxas not on PATH")


def test_nvrtc_is_installed_with_the_package() -> None:
    assert "nvrtc" in COMPILERS


@pytest.mark.parametrize("compiler", ["nvrtc", pytest.param("nvcc", marks=needs_nvcc)])
@pytest.mark.parametrize("arch", ["sm_80", "sm_90"])
def test_every_stage_is_kept(compiler: str, arch: str) -> None:
    b = compile_source(KERNEL, arch, compiler=compiler)
    assert b.source == KERNEL and b.arch == arch and b.compiler.startswith(compiler)
    assert ".entry scale_rows" in b.ptx and f".target {arch}" in b.ptx
    assert b.cubin[:4] == b"\x7fELF"  # a cubin is an ELF image
    r = b.resources["scale_rows"]
    assert 0 < r.registers <= 255
    assert r.shared_bytes == 1024 and r.barriers == 1 and r.spills == 0


def test_report_parser_reads_every_field() -> None:
    log = (
        "ptxas info    : Compiling entry function 'k' for 'sm_90'\n"
        "ptxas info    : Function properties for k\n"
        "    24 bytes stack frame, 8 bytes spill stores, 16 bytes spill loads\n"
        "ptxas info    : Used 40 registers, used 1 barriers, 2048 bytes smem, "
        "380 bytes cmem[0]\n"
    )
    r = parse_ptxas_report(log)["k"]
    assert (r.registers, r.barriers, r.shared_bytes, r.constant_bytes) == (40, 1, 2048, 380)
    assert (r.stack_bytes, r.spill_stores, r.spill_loads, r.spills) == (24, 8, 16, 24)


@pytest.mark.parametrize("compiler", ["nvrtc", pytest.param("nvcc", marks=needs_nvcc)])
def test_a_compile_error_shows_the_failing_line(compiler: str) -> None:
    bad = KERNEL.replace("2.0f * tile", "2.0f * undeclared_name + tile")
    with pytest.raises(CompileError) as e:
        compile_source(bad, "sm_90", compiler=compiler)
    msg = str(e.value)
    assert "undeclared_name" in msg and ">" in msg and "Fix:" in msg
    failing = [ln for ln in msg.splitlines() if ln.startswith(">")]
    assert failing and "undeclared_name" in failing[0]


def test_unknown_architecture_and_compiler_are_typed() -> None:
    with pytest.raises(DefinitionError, match="sm_75"):
        compile_source(KERNEL, "sm_75")
    with pytest.raises(DefinitionError, match="clang"):
        compile_source(KERNEL, "sm_90", compiler="clang")


def test_no_toolchain_is_a_typed_error(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(stages, "_nvrtc", lambda: None)
    monkeypatch.setattr(shutil, "which", lambda name: None)
    with pytest.raises(CudaToolchainError) as e:
        compile_source(KERNEL, "sm_90")
    assert isinstance(e.value, NcdError) and "pip install cuda-bindings" in str(e.value)
    with pytest.raises(CudaToolchainError, match="'nvrtc' is not available"):
        compile_source(KERNEL, "sm_90", compiler="nvrtc")
