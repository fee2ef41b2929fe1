"""The ``cuda`` backend: ``ncd.compile(model, "cuda")`` -> a callable over NumPy arrays (or
device arrays exposing ``__cuda_array_interface__``, such as torch CUDA tensors).

Each call is checked as the other backends check it (``ncd.reference.prepare`` under
``cast="safe"``: the same typed errors, before any device work), then ``runtime.require()``
makes sure a driver and a GPU are here (``CudaUnavailableError`` naming what is missing and the
fix otherwise). Sizes are read from the inputs; every distinct set of sizes is built once
(``ncd_cuda.build`` with every size a constant, for the GPU's architecture) and kept (the
``max_builds`` most recently used). A call uploads its NumPy inputs, allocates the values the
kernels store, launches the kernels in program order on the default stream, downloads the
outputs (or writes ``out=``) and frees what it allocated. Parameters stay on the device between
calls and are uploaded again only when their bits change. A device array is used in place (no
copy): it must have the wire's shape and dtype and be C-contiguous (bfloat16 data may be given
as its 16 bits, e.g. ``t.view(torch.int16)``, since torch does not describe bfloat16 through
the interface). Work on a device array is ordered by the legacy default stream: finish work
queued on other streams before calling.

Arrays are taken and returned in each wire's format: float32, float64, float16
(``numpy.float16``), bfloat16 (``ml_dtypes.bfloat16``; both 16-bit formats are stored as their
bits) and int64 ids. Calls are thread-safe (one call of an executable at a time).
"""

from __future__ import annotations

import contextlib
import math
import threading
from collections import OrderedDict
from collections.abc import Sequence
from typing import Any, ClassVar

import numpy as np

from ncd.dtypes import dtype as to_dtype
from ncd.errors import DefinitionError, DTypeError, SizeError
from ncd.graph import Graph
from ncd.plugins.interfaces import Backend, Executable
from ncd.pool import OutputPool

__all__ = ["FORMATS", "CudaBackend", "CudaExecutable", "launch_shape"]

#: the float formats the generated kernels store
FORMATS = ("float32", "float16", "bfloat16", "float64")
#: the most threads one block runs
MAX_BLOCK = 1024
#: the block of a kernel that fixes none and needs more than ``MAX_BLOCK`` threads
DEFAULT_BLOCK = 256
INT_MAX = 2**31 - 1
#: headroom below int's limit (kernels add up to a block of indices to an in-range one)
MARGIN = 2**16
OPTIONS = ("device", "max_builds", "plan", "wide", "compiler", "reuse_outputs")


def launch_shape(
    global_size: Sequence[int], local_size: Sequence[int] | None
) -> tuple[tuple[int, ...], tuple[int, ...]]:
    """``(grid, block)`` for a launch of ``global_size`` threads per dimension: blocks of
    ``local_size`` and ``ceil(global / local)`` of them; without a local size, one block of
    the whole launch when it holds at most ``MAX_BLOCK`` threads, else blocks of
    ``DEFAULT_BLOCK`` (kernels return early past their total)."""
    dims = tuple(int(n) for n in global_size)
    if not 1 <= len(dims) <= 3:
        raise SizeError(
            f"a launch over {len(dims)} dimensions ({dims}); CUDA grids have 1 to 3. This is a "
            "code generation bug: report it."
        )
    if local_size is None:
        first = dims[0] if dims[0] <= MAX_BLOCK else DEFAULT_BLOCK
        block = (max(1, first), *(1 for _ in dims[1:]))
    else:
        block = tuple(max(1, int(n)) for n in local_size)
    grid = tuple(-(-n // b) for n, b in zip(dims, block, strict=True))
    return grid, block


def _nbytes(graph: Graph, b: Any) -> int:
    """Bytes of kernel buffer ``b`` (dense, over the bound sizes)."""
    return math.prod(int(graph.size(a) or 1) for a in b.axes) * to_dtype(b.dtype).itemsize


def _elements(graph: Graph, b: Any) -> int:
    return math.prod(int(graph.size(a) or 1) for a in b.axes)


def _spelled(dt: np.dtype[Any]) -> str:
    return f"ml_dtypes.{dt.name}" if dt.name == "bfloat16" else f"numpy.{dt.name}"


def check_formats(graph: Graph) -> None:
    """Every float wire and parameter in a format the kernels store: ``DTypeError`` naming
    the value or parameter, its op and the format otherwise."""
    from ncd.codegen.program import check_stored_formats

    check_stored_formats(graph, FORMATS, "cuda")


def _arch_for(arch: str) -> tuple[str, bool]:
    """The architecture to build for a GPU of ``arch`` and whether to load PTX (the driver
    compiles it for a GPU newer than any architecture ncd-cuda generates for)."""
    from ncd_cuda.stages import ARCHES

    if arch in ARCHES:
        return arch, False
    plain = [a for a in ARCHES if a[3:].isdigit()]
    try:
        number = int(arch[3:])
    except ValueError:
        return plain[-1], True
    older = [a for a in plain if int(a[3:]) <= number]
    if older and int(older[-1][3:]) // 10 == number // 10:
        return older[-1], False  # a cubin runs on later GPUs of its major version
    return (older or plain)[-1], True


class _Program:
    """One build loaded on the device: a function per distinct kernel and, per launch, its
    function, buffers, grid, block and size arguments (every size is a constant of the
    build, so this is fixed)."""

    def __init__(self, built: Any, dev: Any, ptx: bool, wide: bool) -> None:
        from ncd.codegen.layout import evaluate

        self.build = built
        self.dev = dev
        graph = built.graph
        self.modules: list[Any] = []
        functions: dict[str, Any] = {}
        for k in built.kernels:
            module = dev.load(k.ptx.encode() + b"\0" if ptx else k.cubin)
            self.modules.append(module)
            functions[k.name] = dev.function(module, k.name)
        self.wide = wide
        index = "long long" if wide else "int"
        self.launches: list[tuple[Any, Any, tuple[int, ...], tuple[int, ...], list[Any]]] = []
        for src in built.launches:
            sizes = [int(graph.size(graph.axis_by_uid[uid]) or 0) for _, uid in src.sizes]
            env = {name: n for (name, _), n in zip(src.sizes, sizes, strict=True)}
            total = tuple(evaluate(d, env) for d in src.global_size)
            grid, block = launch_shape(total, src.local_size)
            args = [(n, index) for n in sizes]
            self.launches.append((functions[src.name], src, grid, block, args))

    def close(self) -> None:
        unload = getattr(self.dev, "unload", None)
        for m in self.modules:
            if unload is not None:
                unload(m)
        self.modules = []


def _need(graph: Graph, built: Any) -> int:
    """The largest element count or launch size of a build (what its indices must hold)."""
    from ncd.codegen.layout import evaluate

    need = 0
    for src in built.launches:
        for b in src.buffers:
            need = max(need, _elements(graph, b))
        sizes = [int(graph.size(graph.axis_by_uid[uid]) or 0) for _, uid in src.sizes]
        env = {name: n for (name, _), n in zip(src.sizes, sizes, strict=True)}
        total = [evaluate(d, env) for d in src.global_size]
        need = max(need, math.prod(total), *sizes, 0)
    return need


def _bits_of(wire: Any, dt: np.dtype[Any]) -> bool:
    """``dt`` is 16-bit integer or void data standing for a bfloat16 wire's bits."""
    return str(wire) == "bfloat16" and dt.itemsize == 2 and dt.kind in "uiV"


def _overlap(a: tuple[int, int], b: tuple[int, int]) -> bool:
    return a[1] > 0 and b[1] > 0 and a[0] < b[0] + b[1] and b[0] < a[0] + a[1]


class CudaExecutable(Executable):
    """A model compiled for a CUDA GPU (built on first call for each set of sizes)."""

    def __init__(
        self,
        model: Any,
        device: int | str = 0,
        max_builds: int = 8,
        plan: Any = None,
        wide: bool | None = None,
        compiler: str | None = None,
        reuse_outputs: bool = True,
    ) -> None:
        if not isinstance(max_builds, int) or max_builds < 1:
            raise SizeError(
                f"max_builds={max_builds!r}: an executable must keep at least one build. Fix: "
                "pass max_builds >= 1 (default 8)."
            )
        if wide not in (None, True, False):
            raise SizeError(
                f"wide={wide!r}: expected None (64-bit indices only for calls that need them), "
                "True (always) or False (never; such a call is refused). Fix: pass one of these."
            )
        emulated = device == "emulator"
        if not emulated and (not isinstance(device, int) or device < 0):
            raise DefinitionError(
                f"device={device!r}: expected the ordinal of a GPU (0, 1, ...) or 'emulator' "
                "(ncd_cuda.emulate: the same kernels on host threads, for testing without a "
                "GPU). Fix: pass device=0 (the first GPU CUDA_VISIBLE_DEVICES shows)."
            )
        self._emulator: Any = None
        if emulated:
            from ncd_cuda.emulate import EmulatedDevice

            self._emulator = EmulatedDevice()
            device = 0
        self.model = model
        self.ordinal: int = int(device)
        self.max_builds = max_builds
        self.plan = plan
        self.wide = wide
        self.compiler = compiler
        self._programs: OrderedDict[tuple[Any, ...], _Program] = OrderedDict()
        self._builds = 0
        self._last: _Program | None = None
        self._formats_checked = False
        # parameter name -> (device pointer, bytes, the bits uploaded; None: a device array)
        self._params: dict[str, tuple[int, int, np.ndarray | None]] = {}
        self._lock = threading.RLock()
        #: NumPy outputs the caller has let go of serve later calls (``ncd.pool``)
        self.pool = OutputPool(enabled=bool(reuse_outputs))

    def _device(self) -> Any:
        """The GPU (``runtime.device``), or the host emulator with ``device="emulator"``."""
        from ncd_cuda import runtime

        return self._emulator if self._emulator is not None else runtime.device(self.ordinal)

    def _require(self) -> None:
        """``runtime.require()``: a typed error when no GPU can run (not for the emulator)."""
        from ncd_cuda import runtime

        if self._emulator is None:
            runtime.require()

    @property
    def builds(self) -> int:
        """Builds this executable has made (one per distinct set of sizes)."""
        return self._builds

    @property
    def kernel_count(self) -> int:
        """Kernels launched by one call (of the build the last call used; 0 before any)."""
        return 0 if self._last is None else len(self._last.launches)

    def compiled(self, graph: Graph) -> Any:
        """The ``CudaBuild`` serving bound ``graph`` (built and loaded on first use)."""
        with self._lock:
            return self._program(graph).build

    # -- inputs ---------------------------------------------------------------------------

    def _stand_in(self, x: Any, wire: Any, what: str) -> tuple[Any, Any]:
        """For a device array: what ``prepare`` checks in its place (an array of its shape
        and dtype holding zeros, read as a broadcast view; integer ids are downloaded so that
        their range is checked) and its ``DeviceArray``. Other objects pass through."""
        from ncd_cuda import runtime

        if not runtime.is_device_array(x):
            return x, None
        d = runtime.device_array(x, what)
        dt = d.dtype
        if wire is not None and _bits_of(wire, dt):
            dt = np.dtype(to_dtype(wire).numpy)  # bfloat16 given as its 16 bits
        if not d.contiguous:
            raise SizeError(
                f"{what} is a device array of shape {d.shape} that is not C-contiguous; the "
                "kernels read dense row-major data in place. Fix: pass x.contiguous() "
                "(torch) or cupy.ascontiguousarray(x)."
            )
        if dt.kind in "iub":
            self._require()
            host = np.empty(d.shape, dtype=dt)
            self._device().download(d.ptr, host)
            return host, d
        return np.broadcast_to(np.zeros((), dtype=dt), d.shape), d

    def _check_device(self, dev: Any, d: Any, what: str) -> None:
        from ncd_cuda.runtime import CudaRuntimeError

        if not d.nbytes:
            return
        try:
            ordinal = dev.pointer_device(d.ptr)
        except CudaRuntimeError:
            raise DTypeError(
                f"{what}: the pointer its __cuda_array_interface__ gives is not device memory "
                "the CUDA driver knows in this process. Fix: pass a CUDA array (or a NumPy one)."
            ) from None
        except Exception:  # a binding answering in another form: nothing to compare
            return
        if ordinal != self.ordinal:
            raise DTypeError(
                f"{what} lives on GPU {ordinal}; this executable runs on GPU {self.ordinal}. "
                f"Fix: move it (x.to('cuda:{self.ordinal}')) or compile with device={ordinal}."
            )

    def _check_out(
        self, g: Graph, out: Any, arrays: list[Any], device_in: dict[int, Any]
    ) -> list[Any]:
        """``out=``: one array per output (NumPy, or a device array), of its shape and dtype,
        C-contiguous, writeable, sharing memory with no input and no other output."""
        from ncd_cuda import runtime

        outs = [out] if isinstance(out, np.ndarray) or runtime.is_device_array(out) else list(out)
        if len(outs) != len(g.outputs):
            raise SizeError(
                f"out= holds {len(outs)} array(s); the model has {len(g.outputs)} output(s). "
                "Fix: pass one array per output, in order."
            )
        spans: list[tuple[int, int]] = [(d.ptr, d.nbytes) for d in device_in.values()]
        taken: list[tuple[int, int]] = []
        for k, (v, arr) in enumerate(zip(g.outputs, outs, strict=True)):
            want, dt = g.shape(v), np.dtype(to_dtype(g.values[v].dtype).numpy)
            axes = ", ".join(a.describe() for a in g.values[v].axes)
            fix = f"Fix: pass numpy.empty({want}, {_spelled(dt)})."
            if runtime.is_device_array(arr):
                d = runtime.device_array(arr, f"out[{k}]")
                if d.shape != want or (d.dtype != dt and not _bits_of(g.values[v].dtype, d.dtype)):
                    raise SizeError(
                        f"out[{k}] is a device array {d.shape} {d.dtype}; output {k} is {want} "
                        f"{dt} over ({axes}). {fix}"
                    )
                if not d.contiguous or d.readonly:
                    raise SizeError(
                        f"out[{k}] must be C-contiguous and writeable (output {k} over ({axes}))."
                        f" {fix}"
                    )
                span = (d.ptr, d.nbytes)
                if any(_overlap(span, s) for s in spans):
                    raise SizeError(
                        f"out[{k}] shares memory with an input; kernels read their inputs "
                        "while writing outputs. Fix: give a separate array."
                    )
                if any(_overlap(span, s) for s in taken):
                    raise SizeError(
                        f"out[{k}] shares memory with another output; one would overwrite the "
                        "other. Fix: give each output its own array."
                    )
                taken.append(span)
                outs[k] = d
                continue
            if not isinstance(arr, np.ndarray) or arr.shape != want or arr.dtype != dt:
                got = (
                    f"{arr.shape} {arr.dtype}"
                    if isinstance(arr, np.ndarray)
                    else type(arr).__name__
                )
                raise SizeError(
                    f"out[{k}] is {got}; output {k} is {want} {dt} over ({axes}). {fix}"
                )
            if not arr.flags.c_contiguous or not arr.flags.writeable:
                raise SizeError(
                    f"out[{k}] must be C-contiguous and writeable (output {k} over ({axes})). {fix}"
                )
            if any(isinstance(x, np.ndarray) and np.shares_memory(arr, x) for x in arrays):
                raise SizeError(
                    f"out[{k}] shares memory with an input; kernels read their inputs while "
                    "writing outputs. Fix: give a separate array."
                )
            for j in range(k):
                if isinstance(outs[j], np.ndarray) and np.shares_memory(arr, outs[j]):
                    raise SizeError(
                        f"out[{k}] shares memory with out[{j}]; one output would overwrite the "
                        f"other (output {k} over ({axes})). Fix: give each output its own array."
                    )
        return outs

    # -- builds ---------------------------------------------------------------------------

    def _program(self, graph: Graph) -> _Program:
        from ncd_cuda.program import build

        key = tuple((a.uid, graph.size(a)) for a in graph.axes)
        hit = self._programs.get(key)
        if hit is not None:
            self._programs.move_to_end(key)
            self._last = hit
            return hit
        dev = self._device()
        arch, ptx = _arch_for(dev.arch)
        wide = bool(self.wide)
        built = build(graph, arch, compiler=self.compiler, plan=self.plan, wide=wide)
        if not wide and _need(graph, built) > INT_MAX - MARGIN:
            if self.wide is False:
                raise SizeError(
                    "the sizes of this call give arrays or launches past 2^31 - 1 elements, "
                    "more than int indices hold, and wide=False forbids the 64-bit build. Fix: "
                    "compile with wide=None (the default) or wide=True, or run smaller batches."
                )
            built, wide = (
                build(graph, arch, compiler=self.compiler, plan=self.plan, wide=True),
                True,
            )
        program = _Program(built, dev, ptx, wide)
        self._builds += 1
        self._programs[key] = program
        while len(self._programs) > self.max_builds:
            self._programs.popitem(last=False)[1].close()
        self._last = program
        return program

    # -- running --------------------------------------------------------------------------

    def _param(self, dev: Any, name: str, arr: Any, fmt: Any, given: Any) -> int:
        """The device pointer of parameter ``name`` in format ``fmt``: a device array as it
        is; a host array uploaded when its bits differ from the last upload."""
        if given is not None:
            self._drop_param(dev, name)
            self._params[name] = (given.ptr, given.nbytes, None)
            return int(given.ptr)
        with np.errstate(over="ignore", invalid="ignore"):
            data = np.ascontiguousarray(arr, dtype=to_dtype(fmt).numpy)
        hit = self._params.get(name)
        if hit is not None and hit[2] is not None and hit[1] == data.nbytes:
            last = hit[2]
            bits = f"u{data.dtype.itemsize}"
            if last.shape == data.shape and np.array_equal(last.view(bits), data.view(bits)):
                return hit[0]
            dev.upload(hit[0], data)
            self._params[name] = (hit[0], hit[1], data.copy() if data is arr else data)
            return hit[0]
        self._drop_param(dev, name)
        ptr = dev.alloc(data.nbytes)
        dev.upload(ptr, data)
        self._params[name] = (ptr, data.nbytes, data.copy() if data is arr else data)
        return ptr

    def _drop_param(self, dev: Any, name: str) -> None:
        hit = self._params.pop(name, None)
        if hit is not None and hit[2] is not None:
            dev.free(hit[0])

    def close(self) -> None:
        """Free the parameters kept on the device and unload the kernels."""
        from ncd_cuda import runtime

        with self._lock:
            if self._params and runtime._DEVICES.get(self.ordinal) is not None:
                dev = runtime._DEVICES[self.ordinal]
                for name in list(self._params):
                    self._drop_param(dev, name)
            self._params.clear()
            for p in self._programs.values():
                p.close()
            self._programs.clear()
            self._last = None

    def __del__(self) -> None:
        with contextlib.suppress(Exception):  # at interpreter exit the driver may be gone
            self.close()

    def _run(
        self,
        graph: Graph,
        arrays: list[Any],
        params: dict[str, Any],
        device_in: dict[int, Any],
        device_params: dict[str, Any],
        out: list[Any] | None,
    ) -> list[Any]:
        from ncd_cuda import runtime

        dev = self._device()
        for k, d in device_in.items():
            self._check_device(dev, d, f"input {k}")
        for name, d in device_params.items():
            self._check_device(dev, d, f"parameter {name}")
        for k, o in enumerate(out or []):
            if not isinstance(o, np.ndarray):
                self._check_device(dev, o, f"out[{k}]")
        program = self._program(graph)
        g = program.build.graph
        values: dict[int, int] = {}
        owned: list[int] = []
        used = {
            b.value: b for src in program.build.launches for b in src.buffers if b.value is not None
        }
        first: dict[int, int] = {}
        try:
            for k, v in enumerate(g.inputs):
                if v not in used or v in values:
                    continue
                if k in device_in:
                    values[v] = device_in[k].ptr
                    continue
                ptr = dev.alloc(_nbytes(g, used[v]))
                owned.append(ptr)
                dev.upload(
                    ptr, np.ascontiguousarray(arrays[k], dtype=to_dtype(g.values[v].dtype).numpy)
                )
                values[v] = ptr
            for k, v in enumerate(g.outputs):
                first.setdefault(v, k)
                if out is not None and first[v] == k and v in used and v not in values:
                    o = out[k]
                    if not isinstance(o, np.ndarray):
                        values[v] = o.ptr  # the kernels write the caller's device array
            bufs: dict[str, int] = {}
            for fn, src, grid, block, sizes in program.launches:
                args: list[Any] = []
                for b in src.buffers:
                    if b.param is not None:
                        if b.param not in bufs:
                            bufs[b.param] = self._param(
                                dev, b.param, params[b.param], b.dtype, device_params.get(b.param)
                            )
                        args.append((bufs[b.param], "ptr"))
                        continue
                    if b.value not in values:
                        ptr = dev.alloc(_nbytes(g, b))
                        owned.append(ptr)
                        values[b.value] = ptr
                    args.append((values[b.value], "ptr"))
                if all(n > 0 for n in grid):
                    dev.launch(fn, grid, block, [*args, *sizes])
            results: list[Any] = []
            for k, v in enumerate(g.outputs):
                dt = to_dtype(g.values[v].dtype).numpy
                target = out[k] if out is not None else self.pool.take(k, g.shape(v), dt)
                results.append(target)
                if first[v] != k:
                    continue
                nbytes = math.prod(g.shape(v)) * np.dtype(dt).itemsize
                if isinstance(target, np.ndarray):
                    if v in values:
                        dev.download(values[v], target)
                    else:  # an output that is an input no kernel reads
                        k_in = g.inputs.index(v)
                        if k_in in device_in:
                            dev.download(device_in[k_in].ptr, target)
                        else:
                            target[...] = arrays[k_in]
                elif values.get(v) != target.ptr:
                    if v in values:
                        dev.copy(target.ptr, values[v], nbytes)
                    else:
                        k_in = g.inputs.index(v)
                        if k_in in device_in:
                            dev.copy(target.ptr, device_in[k_in].ptr, nbytes)
                        else:
                            dev.upload(target.ptr, np.ascontiguousarray(arrays[k_in], dtype=dt))
            for k, v in enumerate(g.outputs):
                j = first[v]
                if j == k:
                    continue
                src_out, dst = results[j], results[k]
                if isinstance(dst, np.ndarray):
                    if isinstance(src_out, np.ndarray):
                        dst[...] = src_out
                    else:
                        dev.download(src_out.ptr, dst)
                elif isinstance(src_out, np.ndarray):
                    dev.upload(dst.ptr, src_out)
                else:
                    dev.copy(dst.ptr, src_out.ptr, dst.nbytes)
            dev.synchronize()
        finally:
            # after a failed launch the context is unusable and every free fails too: the
            # error that stopped the call is the one to see
            for ptr in owned:
                with contextlib.suppress(runtime.CudaRuntimeError):
                    dev.free(ptr)
        return results

    def __call__(self, *inputs: Any, params: Any = None, out: Any = None) -> Any:
        """Run on NumPy arrays (or device arrays, used in place). ``out``: an array (or a
        tuple, one per output; NumPy or device arrays) to write into instead of fresh NumPy
        arrays; it is returned. Safe to call from several threads."""
        from ncd.graph import as_graph
        from ncd.reference import prepare
        from ncd_cuda import runtime

        model = as_graph(self.model, "running")
        stand_ins: list[Any] = []
        device_in: dict[int, Any] = {}
        for k, x in enumerate(inputs):
            wire = model.values[model.inputs[k]].dtype if k < len(model.inputs) else None
            host, d = self._stand_in(x, wire, f"input {k}")
            stand_ins.append(host)
            if d is not None:
                device_in[k] = d
        device_params: dict[str, Any] = {}
        given_params = params
        if params is not None and hasattr(params, "items"):
            wanted = model.params()
            given_params = {}
            for name, p in params.items():
                wire = wanted[name].dtype if name in wanted else None
                host, d = self._stand_in(p, wire, f"parameter {name}")
                given_params[name] = host
                if d is not None:
                    device_params[name] = d
        graph, arrays, ps = prepare(self.model, stand_ins, given_params, cast="safe")
        for k in device_in:
            self._check_wire(
                graph.values[graph.inputs[k]].dtype, arrays[k], stand_ins[k], f"input {k}"
            )
        for name in device_params:
            self._check_wire(
                graph.params()[name].dtype, ps[name], given_params[name], f"parameter {name}"
            )
        given = None if out is None else self._check_out(graph, out, arrays, device_in)
        if not self._formats_checked:
            check_formats(model)
            self._formats_checked = True
        self._require()
        with self._lock:
            outs = self._run(graph, arrays, ps, device_in, device_params, given)
        if out is not None:  # a device array given as out= is returned as the caller's object
            mine = [out] if isinstance(out, np.ndarray) or runtime.is_device_array(out) else out
            outs = [o if isinstance(o, np.ndarray) else m for o, m in zip(outs, mine, strict=True)]
        return outs[0] if len(outs) == 1 else tuple(outs)

    @staticmethod
    def _check_wire(wire: Any, checked: Any, stand_in: Any, what: str) -> None:
        """A device array runs as it is: refused when ``prepare`` would convert it."""
        if checked is not stand_in and np.dtype(checked.dtype) != np.dtype(stand_in.dtype):
            want = np.dtype(to_dtype(wire).numpy)
            raise DTypeError(
                f"{what} is a device array of dtype {stand_in.dtype}, but its wire is {wire}; "
                f"device arrays are used in place, not converted. Fix: convert it on the device "
                f"to {_spelled(want)} (torch: x.to(torch.{want.name}))."
            )


class CudaBackend(Backend):
    name = "cuda"
    capabilities: ClassVar[frozenset[str]] = frozenset({"plan", "gpu", "float64"})
    description = (
        "CUDA C kernels compiled by NVRTC (or nvcc) to cubins and run through the CUDA driver "
        "(cuda-bindings, or pycuda where installed)"
    )

    def compile(self, model: Any, **options: Any) -> Executable:
        """Options: ``device`` (GPU ordinal, default 0), ``max_builds`` (builds kept, one per
        set of sizes; default 8), ``plan`` (render this plan, ``ncd.plan(model,
        target="cuda")`` of the bound graph each call runs), ``wide`` (64-bit indices: None,
        when a call's arrays need them; True, always; False, never: such a call is a
        ``SizeError``), ``compiler`` (``"nvrtc"`` or ``"nvcc"``; default the first there),
        ``reuse_outputs`` (default True: a NumPy output the caller no longer refers to serves a
        later call's output, ``ncd.pool``). Nothing here needs a GPU: the first call builds and
        runs."""
        unknown = sorted(set(options) - set(OPTIONS))
        if unknown:
            raise DefinitionError(
                f"ncd.compile(target='cuda') got unknown option(s) {', '.join(unknown)}. Fix: "
                f"use {', '.join(OPTIONS)}."
            )
        return CudaExecutable(model, **options)

    def resources(self, plan: Any) -> dict[str, dict[str, int]]:
        """Each plan kernel's block size and ptxas's registers and shared memory, compiled for
        the GPU's architecture (else sm_90) without running anything."""
        from ncd_cuda.program import build

        b = build(plan.graph, plan=plan)
        used = {k.name: k for k in b.kernels}
        out: dict[str, dict[str, int]] = {}
        for src in b.launches:
            k = used[src.name]
            block = src.local_size[0] if src.local_size else src.global_size[0]
            if not isinstance(block, int):
                continue  # a block size left to run time: no report for it
            out[src.kernel.name] = {
                "threads": int(block),
                "registers": k.resources.registers,
                "shared_bytes": k.resources.shared_bytes,
            }
        return out

    def unavailable(self) -> str | None:
        """``probe().missing``: no driver binding, no NVIDIA driver or no GPU (with the fix)."""
        from ncd_cuda.runtime import probe

        found = probe()
        return None if found.ok else found.missing or "no CUDA device"

    def plan(self, graph: Any, *, tiles: Any = None, **options: Any) -> Any:
        """The kernels ``compile`` renders for ``graph``: ``ncd.fuse``'s, with the streamed
        attention's choices, marked ``target="cuda"`` (``ncd_cuda.generate.cuda_plan``)."""
        from ncd.errors import ScheduleError
        from ncd.graph import as_graph
        from ncd_cuda.generate import cuda_plan

        if options:
            raise ScheduleError(
                f"ncd.plan(target='cuda') takes no options (got {', '.join(sorted(options))}). "
                "Fix: drop them."
            )
        return cuda_plan(as_graph(graph, "ncd.plan"), tiles)
