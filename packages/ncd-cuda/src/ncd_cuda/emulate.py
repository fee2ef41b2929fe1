"""A host SIMT emulator for ncd-cuda's generated programs: the CUDA C that NVRTC compiles for
the GPU, compiled by the host's C++ compiler and run with one host thread per CUDA thread.

It exists so the generated kernels can be checked against the NumPy reference on a machine
without a GPU: the same source text (the preamble's GPU-only parts are behind ``NCD_EMULATE``),
the same launch shapes, argument packing and buffers (``EmulatedDevice`` has the interface of
``ncd_cuda.runtime.Device``, so ``ncd.compile(model, "cuda")`` runs on it unchanged).

What it models: blocks run one after another; a block's threads run concurrently (OS threads),
``__syncthreads`` is a barrier of the block, ``__shfl_xor_sync`` an exchange through a barrier
of the warp, and ``ncd_mma_f16``/``ncd_mma_bf16`` the m16n8k16 tile product with the PTX ISA's
fragment layout (products and sums in float32). float16/bfloat16 conversions round to nearest
even as ``cvt.rn`` does. What it does not model: timing, memory coalescing, the exact summation
order inside a tensor core, and anything outside the subset ncd generates.
"""

from __future__ import annotations

import ctypes
import hashlib
import os
import re
import shutil
import subprocess
import tempfile
import threading
from typing import Any

import numpy as np

from ncd.errors import CompileError, NcdError, source_excerpt

__all__ = ["EmulatedDevice", "EmulatorUnavailableError", "available"]


class EmulatorUnavailableError(NcdError, RuntimeError):
    """No host C++20 compiler (``g++`` or ``clang++``) to build the emulated program."""


def _compiler() -> str | None:
    for name in ("g++", "clang++"):
        if shutil.which(name):
            return name
    return None


def available() -> bool:
    """A host C++ compiler is here (the emulator can run)."""
    return _compiler() is not None


# The CUDA built-ins and the GPU-only helpers of ncd's programs, on the host.
RUNTIME = r"""
#include <algorithm>
#include <barrier>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <functional>
#include <memory>
#include <thread>
#include <vector>
using std::min; using std::max; using std::exp; using std::log; using std::sqrt;
using std::erf; using std::tanh; using std::fmax; using std::fmin; using std::fabs; using std::pow;
struct ncd_dim3 { unsigned x, y, z; };
namespace ncd_emu {
struct Warp {
    std::unique_ptr<std::barrier<>> bar;
    double slot[32];
    unsigned frag[32][10];
    float acc[32][4];
};
struct Block {
    std::unique_ptr<std::barrier<>> bar;
    std::vector<Warp> warps;
};
inline ncd_dim3 grid_dim, block_dim;
inline Block* block = nullptr;
inline thread_local ncd_dim3 tid, bid;
inline Warp& warp() { return block->warps[tid.x / 32]; }
inline unsigned lane() { return tid.x % 32; }
template <typename T> T shfl_xor(T v, int offset) {
    Warp& w = warp();
    std::memcpy(&w.slot[lane()], &v, sizeof(T));
    w.bar->arrive_and_wait();
    T out;
    std::memcpy(&out, &w.slot[lane() ^ (unsigned)offset], sizeof(T));
    w.bar->arrive_and_wait();
    return out;
}
inline float f16_to_f32(unsigned short h) { _Float16 x; std::memcpy(&x, &h, 2); return (float)x; }
inline unsigned short f32_to_f16(float f) {
    _Float16 x = (_Float16)f; unsigned short h; std::memcpy(&h, &x, 2); return h;
}
inline float bf16_to_f32(unsigned short h) {
    unsigned u = (unsigned)h << 16; float f; std::memcpy(&f, &u, 4); return f;
}
inline unsigned short f32_to_bf16(float f) {
    unsigned u; std::memcpy(&u, &f, 4);
    if ((u & 0x7fffffffu) > 0x7f800000u) return 0x7fff;  // cvt.rn's canonical NaN
    return (unsigned short)((u + 0x7fffu + ((u >> 16) & 1u)) >> 16);
}
// one warp's d += a b on a 16 x 8 x 16 tile, each lane holding its fragments
template <float (*Load)(unsigned short)>
void mma(float& d0, float& d1, float& d2, float& d3, unsigned a0, unsigned a1, unsigned a2,
         unsigned a3, unsigned b0, unsigned b1) {
    Warp& w = warp();
    unsigned l = lane();
    unsigned* f = w.frag[l];
    f[0] = a0; f[1] = a1; f[2] = a2; f[3] = a3; f[4] = b0; f[5] = b1;
    w.acc[l][0] = d0; w.acc[l][1] = d1; w.acc[l][2] = d2; w.acc[l][3] = d3;
    w.bar->arrive_and_wait();
    if (l == 0) {
        float A[16][16], B[16][8], C[16][8];
        for (unsigned t = 0; t < 32; ++t) {
            unsigned g = t / 4, q = t % 4;
            const unsigned* r = w.frag[t];
            auto lo = [](unsigned v) { return (unsigned short)(v & 0xffffu); };
            auto hi = [](unsigned v) { return (unsigned short)(v >> 16); };
            // A: a0 (g, 2q..), a1 (g+8, 2q..), a2 (g, 2q+8..), a3 (g+8, 2q+8..)
            const unsigned rows[4] = {g, g + 8, g, g + 8}, cols[4] = {0, 0, 8, 8};
            for (int k = 0; k < 4; ++k) {
                A[rows[k]][2 * q + cols[k]] = Load(lo(r[k]));
                A[rows[k]][2 * q + cols[k] + 1] = Load(hi(r[k]));
            }
            // B: b0 (k 2q.., n g), b1 (k 2q+8.., n g)
            B[2 * q][g] = Load(lo(r[4])); B[2 * q + 1][g] = Load(hi(r[4]));
            B[2 * q + 8][g] = Load(lo(r[5])); B[2 * q + 9][g] = Load(hi(r[5]));
            // C: c0 (g, 2q), c1 (g, 2q+1), c2 (g+8, 2q), c3 (g+8, 2q+1)
            C[g][2 * q] = w.acc[t][0]; C[g][2 * q + 1] = w.acc[t][1];
            C[g + 8][2 * q] = w.acc[t][2]; C[g + 8][2 * q + 1] = w.acc[t][3];
        }
        for (int m = 0; m < 16; ++m)
            for (int n = 0; n < 8; ++n) {
                float s = C[m][n];
                for (int k = 0; k < 16; ++k) s += A[m][k] * B[k][n];
                C[m][n] = s;
            }
        for (unsigned t = 0; t < 32; ++t) {
            unsigned g = t / 4, q = t % 4;
            w.acc[t][0] = C[g][2 * q]; w.acc[t][1] = C[g][2 * q + 1];
            w.acc[t][2] = C[g + 8][2 * q]; w.acc[t][3] = C[g + 8][2 * q + 1];
        }
    }
    w.bar->arrive_and_wait();
    d0 = w.acc[l][0]; d1 = w.acc[l][1]; d2 = w.acc[l][2]; d3 = w.acc[l][3];
    w.bar->arrive_and_wait();
}
// blocks one after another, a block's threads at once; a thread that returns leaves its
// barriers (arrive_and_drop), as an exited GPU thread no longer holds one back
inline void run(unsigned grid, unsigned threads, const std::function<void()>& body) {
    grid_dim = {grid, 1, 1};
    block_dim = {threads, 1, 1};
    for (unsigned b = 0; b < grid; ++b) {
        Block blk;
        blk.bar = std::make_unique<std::barrier<>>((std::ptrdiff_t)threads);
        unsigned nw = (threads + 31) / 32;
        blk.warps.resize(nw);
        for (unsigned k = 0; k < nw; ++k) {
            unsigned n = std::min(32u, threads - 32 * k);
            blk.warps[k].bar = std::make_unique<std::barrier<>>((std::ptrdiff_t)n);
        }
        block = &blk;
        std::vector<std::thread> pool;
        for (unsigned t = 0; t < threads; ++t)
            pool.emplace_back([&, t, b] {
                tid = {t, 0, 0};
                bid = {b, 0, 0};
                body();
                block->warps[t / 32].bar->arrive_and_drop();
                block->bar->arrive_and_drop();
            });
        for (auto& th : pool) th.join();
        block = nullptr;
    }
}
}  // namespace ncd_emu
#define threadIdx ncd_emu::tid
#define blockIdx ncd_emu::bid
#define blockDim ncd_emu::block_dim
#define gridDim ncd_emu::grid_dim
#define __syncthreads() ncd_emu::block->bar->arrive_and_wait()
#define __shfl_xor_sync(mask, v, offset) ncd_emu::shfl_xor(v, offset)
#define __global__
#define __device__
#define __forceinline__ inline
#define __shared__ static
#define __align__(n) __attribute__((aligned(n)))
#define __launch_bounds__(n)
inline float __int_as_float(int i) { float f; std::memcpy(&f, &i, 4); return f; }
inline float __uint_as_float(unsigned i) { float f; std::memcpy(&f, &i, 4); return f; }
inline double __longlong_as_double(long long i) { double f; std::memcpy(&f, &i, 8); return f; }
inline float rsqrt(float x) { return 1.0f / std::sqrt(x); }
inline double rsqrt(double x) { return 1.0 / std::sqrt(x); }
inline float ncd_f16_load(unsigned short h) { return ncd_emu::f16_to_f32(h); }
inline unsigned short ncd_f16_store(float x) { return ncd_emu::f32_to_f16(x); }
inline float ncd_f16_round(float x) { return ncd_f16_load(ncd_f16_store(x)); }
inline float ncd_bf16_load(unsigned short h) { return ncd_emu::bf16_to_f32(h); }
inline unsigned short ncd_bf16_store(float x) { return ncd_emu::f32_to_bf16(x); }
inline float ncd_bf16_round(float x) { return ncd_bf16_load(ncd_bf16_store(x)); }
#define ncd_mma_f16 ncd_emu::mma<ncd_emu::f16_to_f32>
#define ncd_mma_bf16 ncd_emu::mma<ncd_emu::bf16_to_f32>
"""

_KERNEL = re.compile(
    r'extern "C" __global__ void (?:__launch_bounds__\(\d+\) )?(\w+)\(\s*(.*?)\)\s*\{', re.S
)


def _launchers(source: str) -> str:
    """An ``extern "C"`` launcher per kernel: grid, block and the ``void**`` arguments."""
    out = []
    for name, params in _KERNEL.findall(source):
        types = []
        for p in params.split(","):
            p = p.strip().replace("__restrict__", "")
            types.append(re.sub(r"\s*\b\w+$", "", p).strip())
        args = ", ".join(f"*({t}*)a[{k}]" for k, t in enumerate(types))
        out.append(
            f'extern "C" void ncd_emu_launch_{name}(unsigned g, unsigned b, void** a) {{\n'
            f"    ncd_emu::run(g, b, [&] {{ {name}({args}); }});\n}}\n"
        )
    return "\n".join(out)


_LIBS: dict[str, Any] = {}
_LOCK = threading.Lock()


def _library(source: str) -> Any:
    """The program built as a shared library for the host (cached by its text)."""
    key = hashlib.sha256(source.encode()).hexdigest()
    with _LOCK:
        if key in _LIBS:
            return _LIBS[key]
    cxx = _compiler()
    if cxx is None:
        raise EmulatorUnavailableError(
            "the CUDA emulator needs a host C++20 compiler (g++ or clang++). Fix: install one "
            "(apt-get install g++), or run the CUDA program on a GPU."
        )
    text = "#define NCD_EMULATE 1\n" + RUNTIME + source + "\n" + _launchers(source)
    folder = tempfile.mkdtemp(prefix="ncd-emu-")
    cpp, so = os.path.join(folder, "program.cpp"), os.path.join(folder, "program.so")
    with open(cpp, "w") as f:
        f.write(text)
    argv = [cxx, "-std=c++20", "-O1", "-shared", "-fPIC", "-pthread", "-w", "-o", so, cpp]
    done = subprocess.run(argv, capture_output=True, text=True, check=False)
    if done.returncode != 0:
        m = re.search(r"program\.cpp:(\d+):", done.stderr)
        near = source_excerpt(text, int(m.group(1)) if m else None)
        raise CompileError(
            f"the host build of the emulated CUDA program failed:\n{done.stderr[:1500]}\n\n"
            f"{near}\n\nFix: a construct of the generated CUDA the emulator lacks (report it)."
        )
    lib = ctypes.CDLL(so)
    with _LOCK:
        _LIBS[key] = lib
    return lib


class EmulatedDevice:
    """``ncd_cuda.runtime.Device``'s interface on the host: memory is host memory, a module is
    the emulated program of a cubin's source, a launch runs it with host threads."""

    binding = "emulator"
    arch = "sm_90"
    name = "ncd-cuda host emulator"
    ordinal = 0

    def __init__(self) -> None:
        self._buffers: dict[int, np.ndarray] = {}

    def load(self, image: bytes) -> Any:
        from ncd_cuda.program import source_of

        source = source_of(image)
        if source is None:
            raise NcdError(
                "the emulator was given a cubin ncd_cuda.build did not make in this process. "
                "Fix: build the program with ncd_cuda.build (or ncd.compile) first."
            )
        return _library(source)

    def unload(self, module: Any) -> None:
        pass

    def function(self, module: Any, name: str) -> Any:
        fn = getattr(module, f"ncd_emu_launch_{name}")
        fn.argtypes = [ctypes.c_uint, ctypes.c_uint, ctypes.c_void_p]
        fn.restype = None
        return fn

    def alloc(self, nbytes: int) -> int:
        buf = np.zeros(max(16, nbytes), np.uint8)
        ptr = int(buf.ctypes.data)
        self._buffers[ptr] = buf
        return ptr

    def free(self, ptr: int) -> None:
        self._buffers.pop(ptr, None)

    def upload(self, ptr: int, array: np.ndarray) -> None:
        src = np.ascontiguousarray(array)
        ctypes.memmove(ptr, src.ctypes.data, src.nbytes)

    def download(self, ptr: int, array: np.ndarray) -> None:
        assert array.flags.c_contiguous
        ctypes.memmove(array.ctypes.data, ptr, array.nbytes)

    def copy(self, dst: int, src: int, nbytes: int) -> None:
        ctypes.memmove(dst, src, nbytes)

    def launch(
        self, function: Any, grid: Any, block: Any, args: Any, shared_bytes: int = 0
    ) -> None:
        from ncd_cuda.runtime import pack_args

        g = int(np.prod([int(x) for x in grid]))
        b = int(np.prod([int(x) for x in block]))
        cells, addresses = pack_args(args)
        function(g, b, addresses.ctypes.data)
        del cells

    def synchronize(self) -> None:
        pass

    def pointer_device(self, ptr: int) -> int:
        return 0
