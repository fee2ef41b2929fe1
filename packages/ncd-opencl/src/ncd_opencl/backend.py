"""The ``opencl`` backend: ``ncd.compile(model, "opencl")`` -> a callable over NumPy arrays.

Sizes are read from the inputs on each call (as the reference does). A size bound before
compiling is a constant in the kernels; one left free is a kernel argument, so one program
build serves every length (``exe.builds`` counts builds): per call the backend binds the free
sizes, checks them (``check_fits``, ``check_index``) before any device work, allocates the
intermediates for those sizes (kept for the ``max_builds`` most recently used size sets) and
passes the sizes with the buffers. A call whose arrays pass 2^31 - 1 elements runs a second,
64-bit build. ``specialise=True`` instead builds once per distinct set of sizes, every size a
constant (the executable keeps its ``max_builds`` most recently used builds, default 8).
Calls are thread-safe: one executable runs one call at a time (a lock per executable;
different executables run in parallel). Arrays are taken and returned in each wire's format:
float32, float16 (``numpy.float16``), bfloat16 (``ml_dtypes.bfloat16``), float64 where the
device has fp64, and int64 ids; anything else is refused before device work (``DTypeError``).
Parameters are read in place on host-memory devices, so changing them in place between calls is
seen; elsewhere they are uploaded again whenever their contents differ from the last upload.
"""

from __future__ import annotations

import math
import threading
from collections import OrderedDict
from typing import Any, ClassVar

import numpy as np

from ncd.dtypes import dtype as to_dtype
from ncd.errors import DTypeError
from ncd.graph import Graph
from ncd.plugins.interfaces import Backend, Executable, Exporter
from ncd.pool import OutputPool

__all__ = [
    "FORMATS",
    "Compiled",
    "OpenCLBackend",
    "OpenCLExecutable",
    "check_fits",
    "check_formats",
    "check_index",
    "check_out",
    "device_has_fp64",
]

#: The float formats the generated kernels store (float64 only on a device with fp64).
FORMATS = ("float32", "float16", "bfloat16", "float64")


def device_has_fp64(device: Any) -> bool:
    """The device runs double precision (``CL_DEVICE_DOUBLE_FP_CONFIG`` non-zero)."""
    try:
        return int(device.double_fp_config) != 0
    except Exception:  # a driver without the query has no fp64
        return False


def check_formats(graph: Graph, device: Any = None) -> None:
    """Every float wire and parameter in a format the kernels store, and float64 only on a
    device with fp64: ``DTypeError`` naming the value or parameter, its op, the format and the
    device, before anything is generated or built (``device=None``: formats only)."""
    from ncd.codegen.program import check_stored_formats, float_wires

    check_stored_formats(graph, FORMATS, "opencl")
    for what, fmt in float_wires(graph):
        if fmt == "float64" and device is not None and not device_has_fp64(device):
            raise DTypeError(
                f"{what} is float64, but OpenCL device {device.name.strip()!r} has no double "
                "precision (CL_DEVICE_DOUBLE_FP_CONFIG is 0). Fix: cast the model to float32 "
                "(model.cast(ncd.float32)), or run it on a device with cl_khr_fp64."
            )


def _mb(n: int) -> str:
    return f"{n / 2**20:,.1f} MiB"


def _nbytes(graph: Graph, b: Any) -> int:
    """Bytes of kernel buffer ``b`` (dense, over bound sizes)."""
    return math.prod(int(graph.size(a) or 1) for a in b.axes) * to_dtype(b.dtype).itemsize


INT_MAX = 2**31 - 1
LONG_MAX = 2**63 - 1
#: headroom below an index type's limit: kernels add up to a chunk, a block or a work-group
#: of indices to an in-range one (``x0 + CHUNK``, ``(n + 63) / 64``) before comparing
MARGIN = 2**16


def _size_args(graph: Graph, src: Any) -> list[int]:
    """The values of a kernel's size arguments for ``graph``'s (bound) sizes."""
    return [int(graph.size(graph.axis_by_uid[uid]) or 0) for _, uid in src.sizes]


def _launch_size(graph: Graph, src: Any) -> tuple[int, ...]:
    """The global size of one launch for ``graph``'s sizes (computed on the host per call)."""
    from ncd.codegen.layout import evaluate

    env = {name: n for (name, _), n in zip(src.sizes, _size_args(graph, src), strict=True)}
    return tuple(evaluate(d, env) for d in src.global_size)


def check_index(graph: Graph, gen: Any, wide: bool) -> bool:
    """Whether the build's index type holds every element offset, work-item index and size
    argument of a call with ``graph``'s sizes: ``True`` when ``int`` does, ``False`` when only
    a 64-bit build does (``wide`` says the build at hand already is one). Past what 64 bits
    hold: ``SizeError`` naming the axes, their values and the fix."""
    from ncd.errors import SizeError

    need, what = 0, ""
    for k in gen.kernels:
        for b in k.buffers:
            n = math.prod(int(graph.size(a) or 1) for a in b.axes)
            if n > need:
                need, what = n, f"a buffer over ({', '.join(a.describe() for a in b.axes)})"
        for n in (*_launch_size(graph, k), *_size_args(graph, k)):
            if n > need:
                need, what = n, f"the launch of kernel {k.name}"
    if need > LONG_MAX - MARGIN:
        free = ", ".join(f"{a.describe()} = {graph.size(a)}" for a in graph.axes if a.size is None)
        raise SizeError(
            f"{what} needs {need:,} elements or indices; a 64-bit index holds at most "
            f"{LONG_MAX:,} (sizes: {free or 'all bound'}). Fix: run the work in smaller "
            "batches (smaller sizes for these axes)."
        )
    return need <= INT_MAX - MARGIN or wide


def check_fits(graph: Graph, gen: Any, device: Any) -> None:
    """Every buffer the kernels take (inputs, outputs, stored intermediates, parameters)
    within the device's largest allocation, and all of them within its memory: ``SizeError``
    naming the value, its axes and sizes, and the limit, before anything is built or
    allocated."""
    from ncd.errors import SizeError

    sizes: dict[Any, tuple[int, Any]] = {}
    for k in gen.kernels:
        for b in k.buffers:
            ident = ("param", b.param) if b.param is not None else ("value", b.value)
            if ident not in sizes:
                sizes[ident] = (_nbytes(graph, b), b)
    limit, memory = int(device.max_mem_alloc_size), int(device.global_mem_size)
    fix = "Fix: bind smaller sizes for these axes, or run the work in smaller batches"
    for (kind, what), (nbytes, b) in sizes.items():
        if nbytes > limit:
            desc, hint = _describe(graph, kind, what)
            axes = ", ".join(a.describe() for a in b.axes)
            raise SizeError(
                f"{desc} over ({axes}) needs {nbytes:,} bytes ({_mb(nbytes)}) in one "
                f"buffer; OpenCL device {device.name.strip()!r} allows at most "
                f"{limit:,} bytes ({_mb(limit)}, CL_DEVICE_MAX_MEM_ALLOC_SIZE). "
                f"{fix}{hint}."
            )
    total = sum(n for n, _ in sizes.values())
    if total > memory:
        big = sorted(sizes.items(), key=lambda kv: -kv[1][0])[:3]
        names = "; ".join(
            f"{w} over ({', '.join(a.describe() for a in b.axes)}): {_mb(n)}"
            for (_, w), (n, b) in big
        )
        raise SizeError(
            f"the kernels need {total:,} bytes ({_mb(total)}) of buffers; OpenCL "
            f"device {device.name.strip()!r} has {memory:,} bytes ({_mb(memory)}, "
            f"CL_DEVICE_GLOBAL_MEM_SIZE). Largest: {names}. {fix}."
        )


def _describe(graph: Graph, kind: str, what: Any) -> tuple[str, str]:
    """What a buffer holds, in words, and a hint for an intermediate the plan stores."""
    if kind == "param":
        return f"parameter {what}", ""
    t = graph.values[what]
    if what in graph.inputs:
        return f"input {graph.inputs.index(what)} {t}", ""
    if what in graph.outputs:
        return f"output {graph.outputs.index(what)} {t}", ""
    op = next((n.op.label for n in graph.nodes if what in n.outputs), "?")
    return (
        f"the intermediate {t} written by {op}",
        " (fuse=True keeps intermediates like it on chip where the plan allows)",
    )


class Compiled:
    """One graph built for one device: kernels with their buffers, ready to launch. A graph
    with free sizes is built once with them as kernel arguments; ``run`` then takes the bound
    graph of the call (``prepare``) and keeps intermediates per size set (``max_sizes``).
    Not thread-safe by itself: ``OpenCLExecutable`` serialises the calls (kernel objects'
    arguments and the intermediate buffers are shared between launches)."""

    def __init__(
        self,
        graph: Graph,
        device: str | None,
        fast_math: bool,
        fuse: bool | str,
        tiled: bool,
        local_memory: bool | None = None,
        plan: Any = None,
        wide: bool = False,
        max_sizes: int = 8,
        reuse_outputs: bool = True,
        lanes: int | None = None,
    ) -> None:
        import pyopencl as cl

        from ncd_opencl.generate import generate
        from ncd_opencl.program import build, default_options, get_context

        self.graph = graph
        check_formats(graph)
        self.ctx, self.queue, self.device = get_context(device)
        check_formats(graph, self.device)
        if local_memory is None:  # on-chip local memory (GPUs) pays for staging; CPUs' does not
            local_memory = self.device.local_mem_type == cl.device_local_mem_type.LOCAL
        self.lanes = native_lanes(self.device) if lanes is None else check_lanes(lanes)
        self.gen = generate(
            graph,
            fuse=fuse,
            tiled=tiled,
            local=local_memory,
            plan=plan,
            wide=wide,
            lanes=self.lanes,
        )
        #: free sizes are kernel arguments (else every size is a constant)
        self.free = bool(graph.config().free)
        self.wide = wide
        self.max_sizes = max_sizes
        if not self.free:
            check_fits(graph, self.gen, self.device)
        self.program = build(self.gen.source, device, default_options(fast_math))
        self.values: dict[int, Any] = {}
        # size set -> intermediate buffers for it (free sizes), least recently used dropped
        self._sized: OrderedDict[tuple[int, ...], tuple[dict[int, Any], list[Any]]]
        self._sized = OrderedDict()
        self._free_axes = tuple(a for a in graph.axes if a.size is None)
        # name -> (the caller's array, its buffer, the snapshot uploaded; None: read in place)
        self.params: dict[str, tuple[Any, Any, np.ndarray | None]] = {}
        self.panels: dict[str, Any] = {}  # name -> the buffer its panels are packed into
        self._device_spec = device
        self._packer: Any = None  # the kernel packing them (built at the first call)
        # one kernel object per function: identical layers launch the same one (PoCL compiles
        # a work-group function per kernel object)
        functions = {k.name: cl.Kernel(self.program, k.name) for k in self.gen.kernels if k.text}
        self.launches = [(functions[k.name], k) for k in self.gen.kernels]
        if not self.free:
            self.values = self._allocate(graph)
        self.zero_copy = bool(self.device.host_unified_memory)
        self.pool = OutputPool(enabled=reuse_outputs)

    def _allocate(self, graph: Graph) -> dict[int, Any]:
        """One device buffer per value the kernels pass, an intermediate's buffer handed on
        once the last kernel reading it has been launched (the queue runs in order), to a
        later intermediate of the same byte size: an unrolled scan's steps then cycle through
        a few buffers that stay in cache instead of one fresh buffer per step. Model inputs
        and outputs keep buffers of their own."""
        import pyopencl as cl

        last: dict[int, int] = {}
        for n, (_, src) in enumerate(self.launches):
            for b in src.buffers:
                if b.value is not None:
                    last[b.value] = n
        own = set(graph.inputs) | set(graph.outputs)
        free: dict[int, list[Any]] = {}
        values: dict[int, Any] = {}
        for n, (_, src) in enumerate(self.launches):
            for b in src.buffers:
                v = b.value
                if v is None or v in values:
                    continue
                size = max(4, _nbytes(graph, b))
                spare = free.get(size) if v not in own else None
                values[v] = (
                    spare.pop() if spare else cl.Buffer(self.ctx, cl.mem_flags.READ_WRITE, size)
                )
            for b in src.buffers:
                v = b.value
                if v is not None and last[v] == n and v not in own and v in values:
                    free.setdefault(max(4, _nbytes(graph, b)), []).append(values[v])
        return values

    def buffer_bytes(self) -> tuple[int, int]:
        """(total, largest) bytes of the distinct device buffers this build holds for the
        values its kernels pass (model inputs and outputs included, parameters not), at the
        sizes of its latest call: what a streamed backward saves is seen here."""
        values = self.values or (next(reversed(self._sized.values()))[0] if self._sized else {})
        sizes = {id(b): int(b.size) for b in values.values()}
        return sum(sizes.values()), max(sizes.values(), default=0)

    def sized(self, graph: Graph) -> dict[int, Any]:
        """The value buffers for the sizes of bound ``graph``: checked (``check_fits``,
        ``check_index``) and allocated the first time a size set is seen, before any device
        work; the ``max_sizes`` most recently used size sets are kept."""
        return self._for_sizes(graph)[0]

    def _for_sizes(self, graph: Graph) -> tuple[dict[int, Any], list[Any]]:
        """``sized`` and, per launch, its global size and size arguments for these sizes."""
        if not self.free:
            return self.values, []
        key = tuple(int(graph.size(a) or 0) for a in self._free_axes)
        hit = self._sized.get(key)
        if hit is not None:
            self._sized.move_to_end(key)
            return hit
        if not check_index(graph, self.gen, self.wide):
            from ncd.errors import SizeError

            raise SizeError(
                "this build indexes with int but the call's arrays pass 2^31 - 1 elements "
                "(a code generation bug: the executable picks the 64-bit build for them). "
                "Fix: report it; compile with wide=True meanwhile."
            )
        check_fits(graph, self.gen, self.device)
        index = np.int64 if self.wide else np.int32
        launch = [
            (_launch_size(graph, src), [index(n) for n in _size_args(graph, src)])
            for _, src in self.launches
        ]
        entry = (self._allocate(graph), launch)
        self._sized[key] = entry
        while len(self._sized) > self.max_sizes:
            self._sized.popitem(last=False)
        return entry

    def _param(self, name: str, arr: np.ndarray, fmt: str = "float32") -> Any:
        """The buffer of a parameter of format ``fmt``. On host-memory devices a C-contiguous
        array in that format is read in place (``USE_HOST_PTR``), so in-place changes are
        always seen; any other array is converted on every call and uploaded again when its
        bits differ from the last upload (a compare at memory speed instead of trusting the
        array's identity)."""
        import pyopencl as cl

        hit = self.params.get(name)
        if hit is not None and hit[0] is arr and hit[2] is None:
            return hit[1]
        mf = cl.mem_flags
        want = to_dtype(fmt).numpy
        if self.zero_copy and arr.dtype == want and arr.flags.c_contiguous and arr.nbytes:
            buf = cl.Buffer(self.ctx, mf.READ_ONLY | mf.USE_HOST_PTR, hostbuf=arr)
            self.params[name] = (arr, buf, None)  # keeps arr alive while the buffer reads it
            return buf
        with np.errstate(over="ignore", invalid="ignore"):
            data = np.ascontiguousarray(arr, dtype=want)
        bits = f"u{want.itemsize}"  # compared as bits: NaN equals itself, -0 differs from 0
        last = hit[2] if hit is not None else None
        if (
            last is not None
            and last.shape == data.shape
            and np.array_equal(last.view(bits), data.view(bits))
        ):
            self.params[name] = (arr, hit[1], last)  # type: ignore[index]
            return hit[1]  # type: ignore[index]
        buf = cl.Buffer(self.ctx, mf.READ_ONLY, max(4, data.nbytes))
        if data.nbytes:
            cl.enqueue_copy(self.queue, buf, data)
        self.params[name] = (arr, buf, data.copy() if data is arr else data)
        return buf

    def _pack(self, b: Any, plain: Any) -> Any:
        """The panels of parameter buffer ``b`` (``Buffer.panel``), packed from ``plain`` on
        the device by ``PACK`` at every call that reads them: a parameter changed in place is
        always seen, at the cost of one pass over it (about 1.6 ms for 4096 x 1024 floats on
        PoCL, where the panel GEMM that reads it takes 55 ms)."""
        rows = math.prod(int(self.graph.size(a) or 1) for a in b.axes[: b.panel_axes])
        depth = math.prod(int(self.graph.size(a) or 1) for a in b.axes[b.panel_axes :])
        panels = -(-rows // b.panel)
        out = self.panels.get(b.param)
        if out is None:
            import pyopencl as cl

            size = max(4, panels * b.panel * depth * 4)
            out = self.panels[b.param] = cl.Buffer(self.ctx, cl.mem_flags.READ_WRITE, size)
        if self._packer is None:
            import pyopencl as cl

            from ncd_opencl.program import build, default_options

            program = build(PACK, self._device_spec, default_options(False))
            self._packer = cl.Kernel(program, "ncd_pack_panels")
        pack = self._packer
        gsize = (-(-depth // PACK_DEPTH), panels)
        pack(
            self.queue, gsize, None, plain, out, np.int64(rows), np.int64(depth), np.int32(b.panel)
        )
        return out

    def profile(
        self,
        arrays: list[np.ndarray],
        params: dict[str, np.ndarray],
        reps: int = 3,
        graph: Graph | None = None,
    ) -> dict[str, float]:
        """Median seconds per kernel (each launch waited for), after one warm-up run
        (``graph``: the call's bound graph, for a build with free sizes)."""
        import time

        g = self.graph if graph is None else graph
        self.run(arrays, params, graph=g)
        values, launch = self._for_sizes(g)
        times: dict[str, list[float]] = {src.name: [] for _, src in self.launches}
        for _ in range(reps):
            for n, (kern, src) in enumerate(self.launches):
                t0 = time.perf_counter()
                self._launch(kern, src, params, values, None, launch[n] if launch else None)
                self.queue.finish()
                times[src.name].append(time.perf_counter() - t0)
        return {k: sorted(v)[len(v) // 2] for k, v in times.items()}

    def _launch(
        self,
        kern: Any,
        src: Any,
        params: dict[str, np.ndarray],
        values: dict[int, Any] | None = None,
        bufs: dict[tuple[str, int], Any] | None = None,
        launch: tuple[tuple[int, ...], list[Any]] | None = None,
    ) -> None:
        values = self.values if values is None else values
        bufs = {} if bufs is None else bufs  # each parameter (and packing) resolved once per call
        args = []
        for b in src.buffers:
            if b.param is None:
                args.append(values[b.value])
            else:
                key = (b.param, b.panel)
                if key not in bufs:
                    bufs[key] = self._param(b.param, params[b.param], b.dtype)
                    if b.panel:
                        bufs[key] = self._pack(b, bufs[key])
                args.append(bufs[key])
        if launch is None:  # every size a literal
            kern(self.queue, src.global_size, src.local_size, *args)
            return
        gsize, sizes = launch  # this call's launch size and size arguments
        kern(self.queue, gsize, src.local_size, *args, *sizes)

    def run(
        self,
        arrays: list[np.ndarray],
        params: dict[str, np.ndarray],
        out: list[np.ndarray] | None = None,
        graph: Graph | None = None,
    ) -> list[np.ndarray]:
        """Inputs in, outputs out (into ``out`` when given, checked by ``check_out``);
        ``graph``: the call's bound graph (``prepare``) for a build with free sizes. On a
        device sharing host memory (PoCL's CPU device) the kernels read the input arrays and
        write the output arrays in place (``USE_HOST_PTR`` buffers, mapped once at the end for
        coherence; vector accesses need only element alignment, see the dialect); elsewhere
        they are copied."""
        import pyopencl as cl

        g, mf = (self.graph if graph is None else graph), cl.mem_flags
        fixed, launch = self._for_sizes(g)
        values = dict(fixed)
        mapped = []
        for v, x in zip(g.inputs, arrays, strict=True):
            if v in values:
                host = np.ascontiguousarray(x, dtype=_dtype(g, v))
                if self.zero_copy and host.nbytes:
                    values[v] = cl.Buffer(self.ctx, mf.READ_ONLY | mf.USE_HOST_PTR, hostbuf=host)
                else:
                    cl.enqueue_copy(self.queue, values[v], host)
        outs: list[np.ndarray] = []
        first: dict[int, int] = {}  # value -> the first output slot holding it
        for k, v in enumerate(g.outputs):
            host = out[k] if out is not None else self.pool.take(k, g.shape(v), _dtype(g, v))
            if (
                v in values
                and v not in g.inputs
                and v not in first
                and self.zero_copy
                and host.nbytes
            ):
                values[v] = cl.Buffer(self.ctx, mf.READ_WRITE | mf.USE_HOST_PTR, hostbuf=host)
                mapped.append((values[v], host))
            first.setdefault(v, k)
            outs.append(host)
        bufs: dict[tuple[str, int], Any] = {}
        for n, (kern, src) in enumerate(self.launches):
            self._launch(kern, src, params, values, bufs, launch[n] if launch else None)
        for k, (v, host) in enumerate(zip(g.outputs, outs, strict=True)):
            if first[v] != k:
                continue  # a repeated output: copied from its first slot below
            if v not in values:  # an output that is an input, untouched
                host[...] = arrays[g.inputs.index(v)]
            elif not any(host is h for _, h in mapped):
                cl.enqueue_copy(self.queue, host, values[v])
        for buf, host in mapped:
            view, _ = cl.enqueue_map_buffer(
                self.queue, buf, cl.map_flags.READ, 0, host.shape, host.dtype
            )
            view.base.release(self.queue)
        self.queue.finish()
        for k, v in enumerate(g.outputs):
            if first[v] != k:
                outs[k][...] = outs[first[v]]
        return outs


#: the packing of a float32 parameter ``(N, K)`` into column panels ``(ceil(N / P), K, P)``
#: (``Buffer.panel``; rows past ``N`` are zeros): one work-item per panel and ``PACK_DEPTH``
#: contracted indices, reading runs of ``K`` and writing the panel's rows (1.6 ms for 4096 x
#: 1024 on PoCL, against 4 ms for one element per work-item); ``long`` indices throughout
PACK_DEPTH = 8
PACK = f"""
__kernel void ncd_pack_panels(__global const float* restrict w, __global float* restrict out,
                              const long rows, const long depth, const int width)
{{
    const long k0 = (long)get_global_id(0) * {PACK_DEPTH}, b = get_global_id(1);
    const long end = min(k0 + {PACK_DEPTH}, depth);
    __global float* o = out + b * depth * width;
    for (int c = 0; c < width; ++c) {{
        const long n = b * width + c;
        __global const float* r = w + min(n, rows - 1) * depth;
        for (long k = k0; k < end; ++k) o[k * width + c] = n < rows ? r[k] : 0.0f;
    }}
}}
"""


def native_lanes(device: Any) -> int:
    """The float vector width ncd-opencl renders for ``device``: 16 where it reports 16
    native float lanes (AVX-512 under PoCL), else 8 (the width every template takes)."""
    return 16 if int(getattr(device, "native_vector_width_float", 0) or 0) >= 16 else 8


def check_lanes(lanes: Any) -> int:
    """``lanes`` when it is a width the templates render (8 or 16), else ``ScheduleError``."""
    from ncd.errors import ScheduleError

    if isinstance(lanes, bool) or lanes not in (8, 16):
        raise ScheduleError(
            f"lanes={lanes!r}: ncd-opencl renders float vectors of 8 or 16 lanes. Fix: pass "
            "lanes=8 or lanes=16, or leave it out (the device's native width)."
        )
    return int(lanes)


def _dtype(g: Graph, v: int) -> Any:
    """The NumPy dtype of value ``v``'s arrays (its wire's format; ml_dtypes for bfloat16)."""
    return to_dtype(g.values[v].dtype).numpy


def _spelled(dt: np.dtype[Any]) -> str:
    """How a user names ``dt``: ``ml_dtypes.bfloat16``, ``numpy.float32``."""
    return f"ml_dtypes.{dt.name}" if dt.name == "bfloat16" else f"numpy.{dt.name}"


def check_out(g: Graph, out: Any, inputs: list[np.ndarray]) -> list[np.ndarray]:
    """``out=``: one array per model output, of its shape and dtype, C-contiguous, writeable,
    sharing no memory with an input (kernels read inputs while they write outputs) nor with
    another output (one would overwrite the other)."""
    from ncd.errors import SizeError

    outs = [out] if isinstance(out, np.ndarray) else list(out)
    if len(outs) != len(g.outputs):
        raise SizeError(
            f"out= holds {len(outs)} array(s); the model has {len(g.outputs)} "
            "output(s). Fix: pass one array per output, in order."
        )
    for k, (v, arr) in enumerate(zip(g.outputs, outs, strict=True)):
        want, dt = g.shape(v), np.dtype(_dtype(g, v))
        axes = ", ".join(a.describe() for a in g.values[v].axes)
        if not isinstance(arr, np.ndarray) or arr.shape != want or arr.dtype != dt:
            got = f"{arr.shape} {arr.dtype}" if isinstance(arr, np.ndarray) else type(arr).__name__
            raise SizeError(
                f"out[{k}] is {got}; output {k} is {want} {dt} over ({axes}). "
                f"Fix: pass numpy.empty({want}, {_spelled(dt)})."
            )
        if not arr.flags.c_contiguous or not arr.flags.writeable:
            raise SizeError(
                f"out[{k}] must be C-contiguous and writeable (output {k} over "
                f"({axes})). Fix: pass numpy.empty({want}, {_spelled(dt)})."
            )
        if any(np.shares_memory(arr, x) for x in inputs):
            raise SizeError(
                f"out[{k}] shares memory with an input; kernels read their inputs "
                "while writing outputs. Fix: give a separate array."
            )
        for j in range(k):
            if np.shares_memory(arr, outs[j]):
                raise SizeError(
                    f"out[{k}] shares memory with out[{j}]; one output would "
                    f"overwrite the other (output {k} over ({axes})). Fix: give "
                    "each output its own array."
                )
    return outs


class OpenCLExecutable(Executable):
    def __init__(
        self,
        model: Any,
        device: str | None = None,
        fast_math: bool = False,
        fuse: bool | str = True,
        tiled: bool = True,
        local_memory: bool | None = None,
        max_builds: int = 8,
        plan: Any = None,
        specialise: bool = False,
        wide: bool | None = None,
        reuse_outputs: bool = True,
        lanes: int | None = None,
    ) -> None:
        from ncd.errors import SizeError

        if not isinstance(max_builds, int) or max_builds < 1:
            raise SizeError(
                f"max_builds={max_builds!r}: an executable must keep at least one "
                "build. Fix: pass max_builds >= 1 (default 8)."
            )
        if wide not in (None, True, False):
            raise SizeError(
                f"wide={wide!r}: expected None (64-bit indices only for calls that need "
                "them), True (always) or False (never; such a call is refused). Fix: pass one "
                "of these."
            )
        self.model = model
        self.options = (device, fast_math, fuse, tiled, local_memory, plan)
        self.max_builds = max_builds
        self.specialise = bool(specialise)
        self.wide = wide
        self.reuse_outputs = bool(reuse_outputs)
        self.lanes = None if lanes is None else check_lanes(lanes)
        self._built: OrderedDict[tuple[Any, ...], Compiled] = OrderedDict()
        self._builds = 0
        self._last: Compiled | None = None
        self._free_axes: tuple[Any, ...] | None = None  # the model's run-time sizes
        self._routes: OrderedDict[tuple[int, ...], bool] = OrderedDict()  # sizes -> wide
        # one call at a time: kernel objects (their arguments) and intermediate buffers are
        # shared between the calls of one build; a lock costs ~0.1 us against a call's launches
        self._lock = threading.RLock()

    @property
    def builds(self) -> int:
        """Program builds this executable has made (one serves every value of a free size;
        a 64-bit variant, or with ``specialise=True`` each size set, is one more)."""
        return self._builds

    @property
    def kernel_count(self) -> int:
        """Kernels launched by one call (of the build the last call used; 0 before any)."""
        return 0 if self._last is None else len(self._last.launches)

    @property
    def outputs_reused(self) -> int:
        """Output arrays served again from the builds' pools (``OutputPool``) so far."""
        return sum(b.pool.reused for b in self._built.values())

    def _build(self, key: tuple[Any, ...], make: Any) -> Compiled:
        hit = self._built.get(key)
        if hit is not None:
            self._built.move_to_end(key)
            return hit
        built: Compiled = make()
        self._builds += 1
        self._built[key] = built
        while len(self._built) > self.max_builds:
            self._built.popitem(last=False)
        return built

    def buffer_bytes(self) -> tuple[int, int]:
        """``Compiled.buffer_bytes`` of the build the latest call ran ((0, 0) before any)."""
        return self._last.buffer_bytes() if self._last is not None else (0, 0)

    def compiled(self, graph: Graph) -> Compiled:
        """The build serving ``graph`` (the call's bound graph): with free sizes the one
        build taking them as arguments (its 64-bit variant when the call's arrays pass
        2^31 - 1 elements), else (or with ``specialise=True``) the build for these sizes.
        Least recently used builds beyond ``max_builds`` are dropped, with their buffers."""
        from ncd.graph import as_graph

        with self._lock:
            model = as_graph(self.model, "compiling")
            if self._free_axes is None:
                plan = self.options[-1]  # a plan of a bound graph renders that graph only
                run_time = (
                    not self.specialise
                    and bool(model.config().free)
                    and (plan is None or bool(plan.graph.config().free))
                )
                self._free_axes = tuple(a for a in model.axes if a.size is None and run_time)
            if not self._free_axes:
                key = tuple((a.uid, graph.size(a)) for a in graph.axes)
                self._last = self._build(
                    key,
                    lambda: Compiled(
                        graph, *self.options, reuse_outputs=self.reuse_outputs, lanes=self.lanes
                    ),
                )
                return self._last
            sizes = tuple(int(graph.size(a) or 0) for a in self._free_axes)
            routed = self._routes.get(sizes)
            if routed is not None:  # checked before: the build these sizes take
                self._last = self._build(("free", routed), lambda: self._free(model, routed))
                return self._last
            self._last = self._route(model, graph)
            self._routes[sizes] = self._last.wide
            while len(self._routes) > 64:
                self._routes.popitem(last=False)
            return self._last

    def _route(self, model: Graph, graph: Graph) -> Compiled:
        """The free-size build for a call with ``graph``'s sizes, checked: ``int`` indices
        when they hold every offset, else the 64-bit build (or a ``SizeError``)."""
        from ncd.errors import SizeError

        if not self.wide:
            narrow = self._build(("free", False), lambda: self._free(model, False))
            if check_index(graph, narrow.gen, False):
                return narrow
            if self.wide is False:
                free = ", ".join(
                    f"{a.describe()} = {graph.size(a)}" for a in model.axes if a.size is None
                )
                raise SizeError(
                    f"the sizes of this call ({free}) give arrays or launches past "
                    f"2^31 - 1 = {INT_MAX:,} elements, more than the int indices and "
                    "size arguments of this build hold, and wide=False forbids the 64-bit "
                    "build. Fix: compile with wide=None (the default) or wide=True, or run "
                    "the work in smaller batches."
                )
            check_fits(graph, narrow.gen, narrow.device)  # arrays the device cannot hold: no build
        wide = self._build(("free", True), lambda: self._free(model, True))
        check_index(graph, wide.gen, True)  # past 64 bits: SizeError
        return wide

    def _free(self, model: Graph, wide: bool) -> Compiled:
        device, fast_math, fuse, tiled, local_memory, plan = self.options
        return Compiled(
            model,
            device,
            fast_math,
            fuse,
            tiled,
            local_memory,
            plan,
            wide,
            self.max_builds,
            self.reuse_outputs,
            self.lanes,
        )

    def __call__(self, *inputs: Any, params: Any = None, out: Any = None) -> Any:
        """Run on NumPy arrays. ``out``: an array (or a tuple, one per output) to write into
        instead of fresh ones, e.g. to reuse memory across calls; it is returned. Safe to
        call from several threads (calls of one executable run one at a time)."""
        from ncd.reference import prepare

        graph, arrays, ps = prepare(self.model, inputs, params, cast="safe")
        given = None if out is None else check_out(graph, out, arrays)
        with self._lock:
            outs = self.compiled(graph).run(arrays, ps, given, graph)
        return outs[0] if len(outs) == 1 else tuple(outs)


class OpenCLBackend(Backend):
    name = "opencl"
    # float64 runs where the device reports fp64 (refused with DTypeError elsewhere)
    capabilities: ClassVar[frozenset[str]] = frozenset({*FORMATS, "fused", "plan", "tune"})
    description = "fused OpenCL C kernels built with pyopencl (PoCL's CPU device by default)"
    plan_options: ClassVar[frozenset[str]] = frozenset({"fuse", "tiled", "local_memory", "lanes"})
    tuning_machine: ClassVar[str | None] = "host"  # ncd-perf's machine for this host's CPU

    def compile(self, model: Any, **options: Any) -> Executable:
        """Options: ``device`` (index ``"P:D"`` or name substring), ``fast_math`` (default
        False), ``fuse`` (True: ncd.fuse or the local planner; ``"local"``; False: one kernel
        per op), ``tiled`` (use the tiled matmul template), ``local_memory`` (stage matmul
        tiles in ``__local`` memory; default: when the device's local memory is dedicated),
        ``max_builds`` (builds kept, and with free sizes the size sets whose intermediates
        are kept; least recently used dropped; default 8), ``plan`` (render this plan,
        ``ncd.plan(model, target="opencl")``: its graph must be the one each call binds, or
        the model's own with its free sizes), ``specialise`` (build once per distinct set of
        sizes with every size a constant, instead of one build taking free sizes as kernel
        arguments), ``wide`` (64-bit indices: None, when a call's arrays need them (a second
        build); True, always; False, never: such a call is a ``SizeError``),
        ``reuse_outputs`` (default True: an output array the caller no longer refers to is
        reused for a later call's output instead of a fresh allocation, see ``ncd.pool``),
        ``lanes`` (the float vector width to render for, 8 or 16; default: the device's
        native width, so a device with 16 float lanes runs float32 weight parameters through
        the panel GEMM, ``ncd_opencl.matmul``)."""
        return OpenCLExecutable(model, **options)

    def plan(self, graph: Any, *, tiles: Any = None, **options: Any) -> Any:
        """The kernels ``compile`` renders for ``graph`` (``ncd.plan(model, target="opencl")``):
        ``ncd.fuse`` split for PoCL, the templates' tiles as choices, ``tiles`` applied.
        Options: ``fuse``, ``tiled``, ``local_memory``, ``lanes`` (as for ``compile``;
        ``local_memory`` defaults to False, PoCL's CPU device, and ``lanes`` to the default
        device's native float width, so the plan is the one ``compile`` renders there)."""
        from ncd.errors import ScheduleError
        from ncd_opencl.schedule import opencl_plan

        unknown = set(options) - self.plan_options
        if unknown:
            raise ScheduleError(
                f"ncd.plan(target='opencl') got unknown option(s) {', '.join(sorted(unknown))}. "
                "Fix: use fuse=, tiled=, local_memory= or lanes=."
            )
        return opencl_plan(
            graph,
            options.get("fuse", True),
            options.get("tiled", True),
            bool(options.get("local_memory", False)),
            tiles,
            _lanes(options),
        )

    # -- the schedule space ``ncd.tune`` searches (``ncd_opencl.tuning``) ----------------------
    def candidates(self, kernel: Any, **options: Any) -> list[Any]:
        from ncd_opencl.tuning import candidates

        return candidates(kernel, _local_memory(options), _lanes(options))

    def kernel_keys(self, plan: Any, **options: Any) -> list[str]:
        from ncd_opencl.tuning import kernel_keys

        tiled = bool(options.get("tiled", True))
        return kernel_keys(plan, tiled, _local_memory(options), _lanes(options))

    def measure(
        self, graph: Any, plan: Any, inputs: Any, params: Any, reps: int, **options: Any
    ) -> tuple[Any, list[float]]:
        from ncd_opencl.tuning import measure

        return measure(graph, plan, inputs, params, reps, options)

    def device_key(self, **options: Any) -> str:
        from ncd_opencl.tuning import device_key

        return device_key(options)


def _lanes(options: dict[str, Any]) -> int:
    """``lanes`` as ``compile`` resolves it: given, else the device's native float width
    (8 where no OpenCL device opens: the plan of a machine without one)."""
    given = options.get("lanes")
    if given is not None:
        return check_lanes(given)
    from ncd.errors import NcdError
    from ncd_opencl.program import get_context

    try:
        _, _, dev = get_context(options.get("device"))
    except (NcdError, ImportError):
        return 8
    return native_lanes(dev)


def _local_memory(options: dict[str, Any]) -> bool:
    """``local_memory`` as ``compile`` resolves it: given, else whether the device's local
    memory is dedicated on-chip memory."""
    given = options.get("local_memory")
    if given is not None:
        return bool(given)
    import pyopencl as cl

    from ncd_opencl.program import get_context

    _, _, dev = get_context(options.get("device"))
    return bool(dev.local_mem_type == cl.device_local_mem_type.LOCAL)


class OpenCLSourceExporter(Exporter):
    """``ncd.export(model, "opencl")``: the OpenCL C program of a bound model (no device)."""

    name = "opencl"
    description = "OpenCL C source of the fused kernels"

    def export(self, model: Any, **options: Any) -> Any:
        from ncd_opencl.generate import generate

        graph = model.graph if hasattr(model, "graph") else model
        return generate(graph, **options).source
