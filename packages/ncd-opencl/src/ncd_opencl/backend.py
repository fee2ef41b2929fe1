"""The ``opencl`` backend: ``ncd.compile(model, "opencl")`` -> a callable over NumPy arrays.

Sizes are read from the inputs on each call (as the reference does); each distinct set of
sizes is generated and built once. Parameters are uploaded once per array object.
"""

from __future__ import annotations

from typing import Any, ClassVar

import numpy as np

from ncd.graph import Graph
from ncd.plugins.interfaces import Backend, Executable, Exporter

__all__ = ["Compiled", "OpenCLBackend", "OpenCLExecutable"]

_NP = {"float": np.float32, "double": np.float64, "long": np.int64, "int": np.int32}


class Compiled:
    """One bound graph built for one device: kernels with their buffers, ready to launch."""

    def __init__(self, graph: Graph, device: str | None, fast_math: bool, fuse: bool | str,
                 tiled: bool, local_memory: bool | None = None) -> None:
        import pyopencl as cl

        from ncd_opencl.generate import generate
        from ncd_opencl.program import build, default_options, get_context

        self.graph = graph
        self.ctx, self.queue, self.device = get_context(device)
        if local_memory is None:  # on-chip local memory (GPUs) pays for staging; CPUs' does not
            local_memory = self.device.local_mem_type == cl.device_local_mem_type.LOCAL
        self.gen = generate(graph, fuse=fuse, tiled=tiled, local=local_memory)
        self.program = build(self.gen.source, device, default_options(fast_math))
        mf = cl.mem_flags
        self.values: dict[int, Any] = {}
        for k in self.gen.kernels:
            for b in k.buffers:
                if b.value is not None and b.value not in self.values:
                    nbytes = max(1, int(np.prod([graph.size(a) for a in b.axes], dtype=np.int64))
                                 ) * np.dtype(_NP[b.ctype]).itemsize
                    self.values[b.value] = cl.Buffer(self.ctx, mf.READ_WRITE, nbytes)
        self.params: dict[str, tuple[Any, Any]] = {}
        # one kernel object per function: identical layers launch the same one (PoCL compiles
        # a work-group function per kernel object)
        functions = {k.name: cl.Kernel(self.program, k.name) for k in self.gen.kernels if k.text}
        self.launches = [(functions[k.name], k) for k in self.gen.kernels]
        self.zero_copy = bool(self.device.host_unified_memory)

    def _param(self, name: str, arr: np.ndarray) -> Any:
        import pyopencl as cl

        hit = self.params.get(name)
        if hit is not None and hit[0] is arr:
            return hit[1]
        data = np.ascontiguousarray(arr, dtype=np.float32)
        buf = cl.Buffer(self.ctx, cl.mem_flags.READ_ONLY | cl.mem_flags.COPY_HOST_PTR, hostbuf=data)
        self.params[name] = (arr, buf)  # keep arr alive so its identity stays meaningful
        return buf

    def profile(self, arrays: list[np.ndarray], params: dict[str, np.ndarray],
                reps: int = 3) -> dict[str, float]:
        """Median seconds per kernel (each launch waited for), after one warm-up run."""
        import time

        self.run(arrays, params)
        times: dict[str, list[float]] = {src.name: [] for _, src in self.launches}
        for _ in range(reps):
            for kern, src in self.launches:
                t0 = time.perf_counter()
                self._launch(kern, src, params)
                self.queue.finish()
                times[src.name].append(time.perf_counter() - t0)
        return {k: sorted(v)[len(v) // 2] for k, v in times.items()}

    def _launch(self, kern: Any, src: Any, params: dict[str, np.ndarray],
                values: dict[int, Any] | None = None) -> None:
        values = self.values if values is None else values
        args = [self._param(b.param, params[b.param]) if b.param is not None
                else values[b.value] for b in src.buffers]
        kern(self.queue, src.global_size, src.local_size, *args)

    def run(self, arrays: list[np.ndarray], params: dict[str, np.ndarray],
            out: list[np.ndarray] | None = None) -> list[np.ndarray]:
        """Inputs in, outputs out (into ``out`` when given, checked by ``check_out``). On a
        device sharing host memory (PoCL's CPU device) the kernels read the input arrays and
        write the output arrays in place (``USE_HOST_PTR`` buffers, mapped once at the end for
        coherence; vector accesses need only element alignment, see the dialect); elsewhere
        they are copied."""
        import pyopencl as cl

        g, mf = self.graph, cl.mem_flags
        values = dict(self.values)
        mapped = []
        for v, x in zip(g.inputs, arrays, strict=True):
            if v in values:
                host = np.ascontiguousarray(x, dtype=_dtype(g, v))
                if self.zero_copy and host.nbytes:
                    values[v] = cl.Buffer(self.ctx, mf.READ_ONLY | mf.USE_HOST_PTR, hostbuf=host)
                else:
                    cl.enqueue_copy(self.queue, values[v], host)
        outs = []
        for k, v in enumerate(g.outputs):
            host = out[k] if out is not None else np.empty(g.shape(v), dtype=_dtype(g, v))
            if v in values and v not in g.inputs and self.zero_copy and host.nbytes:
                values[v] = cl.Buffer(self.ctx, mf.READ_WRITE | mf.USE_HOST_PTR, hostbuf=host)
                mapped.append((values[v], host))
            outs.append(host)
        for kern, src in self.launches:
            self._launch(kern, src, params, values)
        for v, host in zip(g.outputs, outs, strict=True):
            if v not in values:  # an output that is an input, untouched
                host[...] = arrays[g.inputs.index(v)]
            elif not any(host is h for _, h in mapped):
                cl.enqueue_copy(self.queue, host, values[v])
        for buf, host in mapped:
            view, _ = cl.enqueue_map_buffer(self.queue, buf, cl.map_flags.READ, 0, host.shape,
                                            host.dtype)
            view.base.release(self.queue)
        self.queue.finish()
        return outs


def _dtype(g: Graph, v: int) -> Any:
    return np.int64 if g.values[v].dtype == "int64" else np.float32


def check_out(g: Graph, out: Any, inputs: list[np.ndarray]) -> list[np.ndarray]:
    """``out=``: one array per model output, of its shape and dtype, C-contiguous, writeable,
    sharing no memory with an input (kernels read inputs while they write outputs)."""
    from ncd.errors import SizeError

    outs = [out] if isinstance(out, np.ndarray) else list(out)
    if len(outs) != len(g.outputs):
        raise SizeError(f"out= holds {len(outs)} array(s); the model has {len(g.outputs)} "
                        "output(s)")
    for k, (v, arr) in enumerate(zip(g.outputs, outs, strict=True)):
        want, dt = g.shape(v), np.dtype(_dtype(g, v))
        axes = ", ".join(a.describe() for a in g.values[v].axes)
        if not isinstance(arr, np.ndarray) or arr.shape != want or arr.dtype != dt:
            got = f"{arr.shape} {arr.dtype}" if isinstance(arr, np.ndarray) else type(arr).__name__
            raise SizeError(f"out[{k}] is {got}; output {k} is {want} {dt} over ({axes})")
        if not arr.flags.c_contiguous or not arr.flags.writeable:
            raise SizeError(f"out[{k}] must be C-contiguous and writeable (output {k} over "
                            f"({axes}))")
        if any(np.shares_memory(arr, x) for x in inputs):
            raise SizeError(f"out[{k}] shares memory with an input; kernels read their inputs "
                            "while writing outputs, so give a separate array")
    return outs


class OpenCLExecutable(Executable):
    def __init__(self, model: Any, device: str | None = None, fast_math: bool = True,
                 fuse: bool | str = True, tiled: bool = True,
                 local_memory: bool | None = None) -> None:
        self.model = model
        self.options = (device, fast_math, fuse, tiled, local_memory)
        self._built: dict[tuple[Any, ...], Compiled] = {}

    def compiled(self, graph: Graph) -> Compiled:
        key = tuple((a.uid, graph.size(a)) for a in graph.axes)
        if key not in self._built:
            self._built[key] = Compiled(graph, *self.options)
        return self._built[key]

    def __call__(self, *inputs: Any, params: Any = None, out: Any = None) -> Any:
        """Run on NumPy arrays. ``out``: an array (or a tuple, one per output) to write into
        instead of fresh ones, e.g. to reuse memory across calls; it is returned."""
        from ncd.reference import prepare

        graph, arrays, ps = prepare(self.model, inputs, params)
        given = None if out is None else check_out(graph, out, arrays)
        outs = self.compiled(graph).run(arrays, ps, given)
        return outs[0] if len(outs) == 1 else tuple(outs)


class OpenCLBackend(Backend):
    name = "opencl"
    capabilities: ClassVar[frozenset[str]] = frozenset({"float32", "fused"})
    description = "fused OpenCL C kernels built with pyopencl (PoCL's CPU device by default)"

    def compile(self, model: Any, **options: Any) -> Executable:
        """Options: ``device`` (index ``"P:D"`` or name substring), ``fast_math`` (default
        True), ``fuse`` (True: ncd.fuse or the local planner; ``"local"``; False: one kernel
        per op), ``tiled`` (use the tiled matmul template), ``local_memory`` (stage matmul
        tiles in ``__local`` memory; default: when the device's local memory is dedicated)."""
        return OpenCLExecutable(model, **options)


class OpenCLSourceExporter(Exporter):
    """``ncd.export(model, "opencl")``: the OpenCL C program of a bound model (no device)."""

    name = "opencl"
    description = "OpenCL C source of the fused kernels"

    def export(self, model: Any, **options: Any) -> Any:
        from ncd_opencl.generate import generate

        graph = model.graph if hasattr(model, "graph") else model
        return generate(graph, **options).source
