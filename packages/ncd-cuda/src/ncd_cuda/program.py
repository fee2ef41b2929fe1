"""``ncd_cuda.build(model, arch=...)``: every kernel of a model through every compile stage.

Each distinct kernel function is compiled on its own (the preamble it needs plus its text), so
its ``.ptx``, ``.cubin`` and ptxas ``.resources`` are its own; layers that share a function
share its compiled kernel. Compiled kernels are cached in-process by (text, arch, compiler).
Nothing here needs a GPU.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from typing import Any

import attrs

from ncd.codegen import KernelSource
from ncd.graph import Graph, as_graph
from ncd.kernel import FusionPlan
from ncd_cuda.dialect import program_preamble
from ncd_cuda.generate import Generated, generate
from ncd_cuda.stages import Build, Resources, compile_source

__all__ = ["CudaBuild", "CudaKernel", "build", "default_arch"]


@attrs.frozen
class CudaKernel:
    """One kernel function: its CUDA C, PTX, cubin and what ptxas reports for it."""

    name: str
    source: str  # the compilable unit: preamble and the function
    ptx: str
    cubin: bytes = attrs.field(repr=False)
    resources: Resources
    style: str  # pointwise | streamed | mma
    launch: KernelSource = attrs.field(repr=False)  # its first launch (buffers, grid, block)
    log: str = attrs.field(repr=False, default="")


@attrs.frozen
class CudaBuild:
    """A model compiled for one architecture: the plan, the launches and the kernels."""

    graph: Graph = attrs.field(eq=False, repr=False)
    plan: FusionPlan = attrs.field(eq=False, repr=False)
    arch: str
    compiler: str
    kernels: tuple[CudaKernel, ...]  # each distinct function once
    launches: tuple[KernelSource, ...] = attrs.field(repr=False)  # program order, by name
    generated: Generated = attrs.field(eq=False, repr=False)

    @property
    def source(self) -> str:
        """The whole program as one CUDA C file."""
        return self.generated.source

    def kernel(self, name: str) -> CudaKernel:
        for k in self.kernels:
            if k.name == name:
                return k
        raise KeyError(name)


_CACHE: OrderedDict[tuple[str, str, str | None], Build] = OrderedDict()
_LOCK = threading.Lock()
_CACHE_SIZE = 256


def _compiled(text: str, arch: str, compiler: str | None) -> Build:
    key = (text, arch, compiler)
    with _LOCK:
        hit = _CACHE.get(key)
        if hit is not None:
            _CACHE.move_to_end(key)
            return hit
    out = compile_source(text, arch, compiler=compiler)
    with _LOCK:
        _CACHE[key] = out
        while len(_CACHE) > _CACHE_SIZE:
            _CACHE.popitem(last=False)
    return out


def source_of(cubin: bytes) -> str | None:
    """The CUDA C of a cubin this process compiled (the emulator runs that source)."""
    with _LOCK:
        for built in _CACHE.values():
            if built.cubin == cubin:
                return built.source
    return None


def default_arch() -> str:
    """The first GPU's architecture when one is here (``sm_90`` on an H200), else ``sm_90``."""
    from ncd_cuda.runtime import probe

    found = probe()
    if found.ok:
        arch = found.devices[0][1]
        from ncd_cuda.stages import ARCHES

        return arch if arch in ARCHES else "sm_90"
    return "sm_90"


def build(
    model: Any,
    arch: str | None = None,
    *,
    compiler: str | None = None,
    plan: FusionPlan | None = None,
    wide: bool = False,
) -> CudaBuild:
    """Generate and compile ``model``'s kernels for ``arch`` (default: the device's, else
    ``sm_90``) with ``compiler`` (``"nvrtc"``, ``"nvcc"``; default the first available).
    ``plan``: render that plan (``ncd.plan(model, target="cuda")``); ``wide``: 64-bit indices."""
    from ncd_cuda.stages import _check_arch

    graph = as_graph(model, "ncd_cuda.build")
    arch = _check_arch(arch or default_arch())
    gen = generate(graph, plan=plan, wide=wide)
    kernels = []
    used = ""
    for src in gen.kernels:
        if not src.text:
            continue  # a later launch of a shared function
        unit = program_preamble([src]) + "\n" + src.text
        out = _compiled(unit, arch, compiler)
        used = out.compiler
        kernels.append(
            CudaKernel(
                name=src.name,
                source=unit,
                ptx=out.ptx,
                cubin=out.cubin,
                resources=out.resources.get(src.name, Resources()),
                style=src.style,
                launch=src,
                log=out.log,
            )
        )
    return CudaBuild(graph, gen.plan, arch, used, tuple(kernels), gen.kernels, gen)
