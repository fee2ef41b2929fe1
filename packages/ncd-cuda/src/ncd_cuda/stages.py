"""The named compile stages of a CUDA program: CUDA C -> PTX -> cubin, each kept.

Two compilers stand behind one call, ``compile_source(source, arch)``:

- ``"nvrtc"``: NVIDIA's runtime compiler from the ``nvidia-cuda-nvrtc`` / ``cuda-bindings`` wheels.
  It needs neither a GPU nor a driver, so CUDA C can be compiled and checked on any Linux host.
- ``"nvcc"``: ``nvcc --ptx`` then ``ptxas``, when the CUDA toolkit is on ``PATH``.

Both pass ``-v`` to ptxas; its report gives each entry function's registers, shared memory, stack
and spills (:class:`Resources`). A failure is an ``ncd.errors.CompileError`` that shows the
compiler's first errors and the generated lines around the first one.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import tempfile
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from ncd.errors import CompileError, DefinitionError, NcdError, source_excerpt

__all__ = [
    "ARCHES",
    "Build",
    "CudaToolchainError",
    "Resources",
    "available_compilers",
    "compile_source",
    "parse_ptxas_report",
]

#: architectures ncd-cuda generates for: Ampere (sm_80), Ada (sm_89), Hopper (sm_90, and sm_90a
#: for the arch-specific wgmma/TMA instructions)
ARCHES = ("sm_80", "sm_86", "sm_89", "sm_90", "sm_90a")

_FIX_TOOLCHAIN = (
    "Fix: pip install cuda-bindings nvidia-cuda-nvrtc (NVRTC compiles without a GPU or driver), "
    "or put the CUDA toolkit's nvcc and ptxas on PATH."
)


class CudaToolchainError(NcdError, RuntimeError):
    """No CUDA compiler is available (neither NVRTC's wheels nor nvcc/ptxas)."""


@dataclass(frozen=True)
class Resources:
    """What ptxas reports for one entry function."""

    registers: int = 0
    shared_bytes: int = 0  # static shared memory
    stack_bytes: int = 0
    spill_stores: int = 0
    spill_loads: int = 0
    barriers: int = 0
    constant_bytes: int = 0  # cmem[0]: the kernel's parameters and constants

    @property
    def spills(self) -> int:
        """Bytes spilled to local memory (stores plus loads); 0 for a kernel that fits."""
        return self.spill_stores + self.spill_loads


@dataclass(frozen=True)
class Build:
    """One program through every stage: its CUDA C, PTX, cubin and the ptxas report."""

    source: str
    arch: str
    ptx: str
    cubin: bytes
    log: str
    compiler: str  # "nvrtc 13.5" or "nvcc 13.0"
    resources: Mapping[str, Resources] = field(default_factory=dict)  # entry name -> report


def _check_arch(arch: str) -> str:
    if arch not in ARCHES:
        raise DefinitionError(
            f"CUDA architecture {arch!r} is not one ncd-cuda generates for ({', '.join(ARCHES)}). "
            "Fix: pass arch='sm_80' (Ampere) or arch='sm_90' (Hopper)."
        )
    return arch


_ENTRY = re.compile(r"(?:Compiling entry function|Function properties for) '?([A-Za-z_][\w$]*)'?")
_NUMBERS = {
    "registers": re.compile(r"Used (\d+) registers"),
    "barriers": re.compile(r"used (\d+) barriers"),
    "shared_bytes": re.compile(r"(\d+) bytes smem"),
    "constant_bytes": re.compile(r"(\d+) bytes cmem\[0\]"),
    "stack_bytes": re.compile(r"(\d+) bytes stack frame"),
    "spill_stores": re.compile(r"(\d+) bytes spill stores"),
    "spill_loads": re.compile(r"(\d+) bytes spill loads"),
}


def parse_ptxas_report(log: str) -> dict[str, Resources]:
    """Entry function -> :class:`Resources` from ptxas's ``-v`` lines (nvrtc or nvcc/ptxas)."""
    found: dict[str, dict[str, int]] = {}
    current: str | None = None
    for line in log.splitlines():
        m = _ENTRY.search(line)
        if m:
            current = m.group(1)
            found.setdefault(current, {})
            continue
        if current is None:
            continue
        for key, pattern in _NUMBERS.items():
            hit = pattern.search(line)
            if hit:
                found[current][key] = int(hit.group(1))
    return {name: Resources(**values) for name, values in found.items()}


def _nvrtc() -> Any:
    try:
        from cuda.bindings import nvrtc
    except ImportError:
        return None
    try:
        err, *_ = nvrtc.nvrtcVersion()
    except Exception:  # the wheel is there but libnvrtc is not loadable
        return None
    return nvrtc if int(err) == 0 else None


def available_compilers() -> list[str]:
    """The compilers usable here, preferred first: ``"nvrtc"``, ``"nvcc"``."""
    found = []
    if _nvrtc() is not None:
        found.append("nvrtc")
    if shutil.which("nvcc") and shutil.which("ptxas"):
        found.append("nvcc")
    return found


def compile_source(
    source: str,
    arch: str = "sm_90",
    *,
    compiler: str | None = None,
    options: Sequence[str] = (),
    name: str = "ncd_kernels.cu",
) -> Build:
    """Compile CUDA C to PTX and a cubin for ``arch``, keeping every stage and ptxas's report."""
    _check_arch(arch)
    usable = available_compilers()
    if compiler is None:
        if not usable:
            raise CudaToolchainError(f"no CUDA compiler found. {_FIX_TOOLCHAIN}")
        compiler = usable[0]
    elif compiler not in ("nvrtc", "nvcc"):
        raise DefinitionError(f"unknown CUDA compiler {compiler!r}. Fix: 'nvrtc' or 'nvcc'.")
    elif compiler not in usable:
        raise CudaToolchainError(
            f"the CUDA compiler {compiler!r} is not available. {_FIX_TOOLCHAIN}"
        )
    run = _with_nvrtc if compiler == "nvrtc" else _with_nvcc
    return run(source, arch, list(options), name)


def _failure(what: str, source: str, log: str) -> CompileError:
    errors = [ln for ln in log.splitlines() if "error" in ln.lower()][:6]
    m = re.search(r"\((\d+)\): (?:catastrophic )?error", log) or re.search(
        r":(\d+):\d*:? ?error", log
    )
    near = source_excerpt(source, int(m.group(1)) if m else None)
    return CompileError(
        f"{what} failed:\n" + ("\n".join(errors) or log[:800]) + "\n\ngenerated source near the "
        f"error:\n{near}\n\nFix: this is a code generation bug or an unsupported op; report it "
        "with the model (the Build's .source holds the full program)."
    )


def _with_nvrtc(source: str, arch: str, options: list[str], name: str) -> Build:
    nvrtc = _nvrtc()
    _, prog = nvrtc.nvrtcCreateProgram(source.encode(), name.encode(), 0, [], [])
    _, major, minor = nvrtc.nvrtcVersion()
    try:
        opts = [f"--gpu-architecture={arch}", "-Xptxas", "-v", "--std=c++17", *options]
        (status,) = nvrtc.nvrtcCompileProgram(prog, len(opts), [o.encode() for o in opts])
        _, size = nvrtc.nvrtcGetProgramLogSize(prog)
        buf = b" " * size
        nvrtc.nvrtcGetProgramLog(prog, buf)
        log = buf.rstrip(b"\0 ").decode(errors="replace")
        if int(status) != 0:
            raise _failure(f"NVRTC {major}.{minor} ({arch})", source, log)
        _, size = nvrtc.nvrtcGetPTXSize(prog)
        ptx = b" " * size
        nvrtc.nvrtcGetPTX(prog, ptx)
        _, size = nvrtc.nvrtcGetCUBINSize(prog)
        cubin = b" " * size
        nvrtc.nvrtcGetCUBIN(prog, cubin)
    finally:
        nvrtc.nvrtcDestroyProgram(prog)
    return Build(
        source=source,
        arch=arch,
        ptx=ptx.rstrip(b"\0").decode(),
        cubin=bytes(cubin),
        log=log,
        compiler=f"nvrtc {major}.{minor}",
        resources=parse_ptxas_report(log),
    )


def _tool(argv: list[str], what: str, source: str) -> str:
    done = subprocess.run(argv, capture_output=True, text=True, check=False)
    if done.returncode != 0:
        raise _failure(what, source, done.stderr + done.stdout)
    return done.stderr + done.stdout


def _nvcc_version() -> str:
    out = subprocess.run(["nvcc", "--version"], capture_output=True, text=True, check=False).stdout
    m = re.search(r"release (\d+\.\d+)", out)
    return m.group(1) if m else "?"


def _with_nvcc(source: str, arch: str, options: list[str], name: str) -> Build:
    with tempfile.TemporaryDirectory(prefix="ncd-cuda-") as tmp:
        cu, ptx_path, cubin_path = (os.path.join(tmp, name + s) for s in ("", ".ptx", ".cubin"))
        with open(cu, "w") as f:
            f.write(source)
        virtual = "compute_" + arch.removeprefix("sm_")
        _tool(
            ["nvcc", f"-arch={virtual}", "--std=c++17", "--ptx", *options, "-o", ptx_path, cu],
            f"nvcc ({arch})",
            source,
        )
        log = _tool(
            ["ptxas", f"-arch={arch}", "-v", "-o", cubin_path, ptx_path], f"ptxas ({arch})", source
        )
        with open(ptx_path) as f:
            ptx = f.read()
        with open(cubin_path, "rb") as fb:
            cubin = fb.read()
    return Build(
        source=source,
        arch=arch,
        ptx=ptx,
        cubin=cubin,
        log=log,
        compiler=f"nvcc {_nvcc_version()}",
        resources=parse_ptxas_report(log),
    )
