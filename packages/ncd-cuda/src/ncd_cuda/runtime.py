"""Finding a CUDA device to run on, with a typed error that says what is missing.

Running needs three things: a Python binding of the driver API (pycuda, as the design names it, or
the official ``cuda-bindings``), the NVIDIA driver (``libcuda.so``) and a GPU. ``probe()`` checks
them in that order without raising; ``require()`` raises :class:`CudaUnavailableError` naming
the first one missing and the fix. Both import their binding lazily.
"""

from __future__ import annotations

import threading
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from ncd.errors import NcdError

__all__ = [
    "ARG_TYPES",
    "CudaRuntimeError",
    "CudaUnavailableError",
    "Device",
    "DeviceArray",
    "Probe",
    "PycudaDevice",
    "alloc",
    "device",
    "device_array",
    "download",
    "free",
    "function",
    "is_device_array",
    "launch",
    "load",
    "pack_args",
    "probe",
    "require",
    "synchronize",
    "upload",
]


class CudaUnavailableError(NcdError, RuntimeError):
    """No CUDA device can run here: no driver binding, no NVIDIA driver, or no GPU."""


@dataclass(frozen=True)
class Probe:
    """What was found: the binding used, the devices' names and compute capabilities."""

    binding: str | None
    devices: tuple[tuple[str, str], ...] = ()  # (name, "sm_90")
    missing: str | None = None  # why nothing can run; None when a device is there

    @property
    def ok(self) -> bool:
        return self.missing is None and bool(self.devices)


_NO_BINDING = (
    "no CUDA driver binding is installed (neither pycuda nor cuda-bindings). "
    "Fix: pip install cuda-bindings (or pycuda where it builds against your driver)."
)
_NO_DRIVER = (
    "the NVIDIA driver library (libcuda.so.1) is not on this machine, so nothing can run on a "
    "GPU here. Fix: run on a machine with an NVIDIA GPU and its driver; without one, "
    "ncd_cuda.stages.compile_source still compiles CUDA C to PTX and cubin."
)

_NO_GPU = "the NVIDIA driver reports no GPU. Fix: check nvidia-smi and CUDA_VISIBLE_DEVICES."


def _with_cuda_bindings() -> Probe:
    from cuda.bindings import driver

    try:
        (err,) = driver.cuInit(0)
    except Exception:  # cuda.pathfinder raises when libcuda is absent
        return Probe("cuda-bindings", missing=_NO_DRIVER)
    if int(err) != 0:
        return Probe(
            "cuda-bindings",
            missing=f"the NVIDIA driver did not initialise (cuInit: {err!r}). "
            "Fix: check nvidia-smi; the GPU may be missing, busy or hidden (CUDA_VISIBLE_DEVICES).",
        )
    _, count = driver.cuDeviceGetCount()
    found = []
    for i in range(count):
        _, dev = driver.cuDeviceGet(i)
        _, raw = driver.cuDeviceGetName(64, dev)
        attr = driver.CUdevice_attribute
        _, major = driver.cuDeviceGetAttribute(
            attr.CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR, dev
        )
        _, minor = driver.cuDeviceGetAttribute(
            attr.CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR, dev
        )
        found.append((raw.split(b"\0")[0].decode(), f"sm_{major}{minor}"))
    if not found:
        return Probe(
            "cuda-bindings", missing="the NVIDIA driver reports no GPU. Fix: check nvidia-smi."
        )
    return Probe("cuda-bindings", tuple(found))


def _with_pycuda() -> Probe:
    import pycuda.driver as drv

    try:
        drv.init()
    except Exception as e:  # pycuda raises its own LogicError/RuntimeError kinds
        return Probe(
            "pycuda", missing=f"pycuda could not initialise the driver ({e}). {_NO_DRIVER}"
        )
    found = []
    for i in range(drv.Device.count()):
        d = drv.Device(i)
        major, minor = d.compute_capability()
        found.append((d.name(), f"sm_{major}{minor}"))
    if not found:
        return Probe("pycuda", missing=_NO_GPU)
    return Probe("pycuda", tuple(found))


def probe() -> Probe:
    """Which binding, driver and GPUs are here (never raises)."""
    try:
        import pycuda.driver  # noqa: F401
    except ImportError:
        pass
    else:
        return _with_pycuda()
    try:
        import cuda.bindings.driver  # noqa: F401
    except ImportError:
        return Probe(None, missing=_NO_BINDING)
    return _with_cuda_bindings()


def require() -> Probe:
    """The probe of a machine that can run CUDA; ``CudaUnavailableError`` naming what is not."""
    found = probe()
    if not found.ok:
        raise CudaUnavailableError(f"ncd-cuda cannot run kernels: {found.missing}")
    return found


# --------------------------------------------------------------------------------------------
# The device runtime: a context, modules, memory and launches over the driver API.
# --------------------------------------------------------------------------------------------


class CudaRuntimeError(NcdError, RuntimeError):
    """A driver call failed on a device that is there: the message names the call and the
    driver's error (``CUDA_ERROR_OUT_OF_MEMORY``, ``CUDA_ERROR_ILLEGAL_ADDRESS``...)."""


#: a kernel argument's C type -> how it is packed for ``kernelParams``
ARG_TYPES: dict[str, Any] = {
    "ptr": np.uint64,
    "int": np.int32,
    "long long": np.int64,
    "unsigned long long": np.uint64,
}

_HINTS = {
    "CUDA_ERROR_OUT_OF_MEMORY": " Fix: run smaller sizes (batches), or free GPU memory "
    "other processes hold (nvidia-smi).",
    "CUDA_ERROR_NO_BINARY_FOR_GPU": " Fix: build for this GPU's architecture "
    "(ncd_cuda.build(model, arch=...)).",
    "CUDA_ERROR_ILLEGAL_ADDRESS": " The context is now unusable; restart the process. This is a "
    "code generation bug in ncd-cuda (or a device array smaller than it claims): report it.",
}


def _check(call: str, result: Any) -> Any:
    """The values of a cuda-bindings call's ``(CUresult, *values)`` tuple: a single value as
    itself, several as a tuple, none as ``None``; ``CudaRuntimeError`` when the result is not
    ``CUDA_SUCCESS``."""
    err, *values = result if isinstance(result, tuple) else (result,)
    if int(err) != 0:
        name = getattr(err, "name", None) or f"CUresult {int(err)}"
        raise CudaRuntimeError(
            f"the CUDA driver call {call} failed with {name}.{_HINTS.get(name, '')}"
        )
    if not values:
        return None
    return values[0] if len(values) == 1 else tuple(values)


def pack_args(args: Sequence[Any]) -> tuple[list[np.ndarray], np.ndarray]:
    """``kernelParams`` in the ``void**`` form: each argument as a one-element NumPy array
    of its C type, and a ``uint64`` array of their addresses (keep both alive until the
    launch returns). An argument is ``(value, ctype)`` with ``ctype`` a key of
    ``ARG_TYPES`` (device pointers are ``"ptr"``), or a NumPy scalar (its own type)."""
    from ncd.errors import DefinitionError

    cells: list[np.ndarray] = []
    for k, a in enumerate(args):
        if isinstance(a, np.generic):
            cells.append(np.array([a]))
            continue
        if not (isinstance(a, tuple) and len(a) == 2 and a[1] in ARG_TYPES):
            raise DefinitionError(
                f"kernel argument {k} is {a!r}; expected (value, ctype) with ctype one of "
                f"{', '.join(map(repr, ARG_TYPES))}, or a NumPy scalar. Fix: pass (ptr, 'ptr') "
                "for a device pointer and (n, 'int') or (n, 'long long') for a size."
            )
        cells.append(np.array([int(a[0])], dtype=ARG_TYPES[a[1]]))
    addresses = np.array([c.ctypes.data for c in cells], dtype=np.uint64)
    return cells, addresses


class Device:
    """One GPU through cuda-bindings: the driver initialised, the device's primary context
    retained and made current in every thread that uses it (a context is current per
    thread). Methods take and return plain ints for device pointers. Thread-safe as the
    driver is; get one with ``device()``."""

    binding = "cuda-bindings"

    def __init__(self, ordinal: int = 0) -> None:
        from cuda.bindings import driver

        self._driver = driver
        self.ordinal = ordinal
        _check("cuInit", driver.cuInit(0))
        count = _check("cuDeviceGetCount", driver.cuDeviceGetCount())
        if not 0 <= ordinal < count:
            raise CudaUnavailableError(
                f"ncd-cuda cannot run kernels: device {ordinal} was asked for but the driver "
                f"reports {count} GPU(s). Fix: pass device=0..{count - 1} (or check "
                "CUDA_VISIBLE_DEVICES)."
            )
        self._dev = _check("cuDeviceGet", driver.cuDeviceGet(ordinal))
        raw = _check("cuDeviceGetName", driver.cuDeviceGetName(64, self._dev))
        self.name = bytes(raw).split(b"\0")[0].decode()
        attr = driver.CUdevice_attribute
        major = _check(
            "cuDeviceGetAttribute",
            driver.cuDeviceGetAttribute(
                attr.CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR, self._dev
            ),
        )
        minor = _check(
            "cuDeviceGetAttribute",
            driver.cuDeviceGetAttribute(
                attr.CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR, self._dev
            ),
        )
        self.arch = f"sm_{major}{minor}"
        self.memory = int(_check("cuDeviceTotalMem", driver.cuDeviceTotalMem(self._dev)))
        self._ctx = _check("cuDevicePrimaryCtxRetain", driver.cuDevicePrimaryCtxRetain(self._dev))
        self._local = threading.local()
        self._current()

    def _current(self) -> None:
        """Make the primary context current in the calling thread (once per thread)."""
        if getattr(self._local, "ready", False):
            return
        _check("cuCtxSetCurrent", self._driver.cuCtxSetCurrent(self._ctx))
        self._local.ready = True

    def load(self, image: bytes) -> Any:
        """A module from a cubin (or NUL-terminated PTX, compiled by the driver's JIT)."""
        self._current()
        data = np.frombuffer(image, dtype=np.uint8).copy()
        return _check("cuModuleLoadData", self._driver.cuModuleLoadData(data.ctypes.data))

    def unload(self, module: Any) -> None:
        """Unload a module (its functions are then invalid)."""
        self._current()
        _check("cuModuleUnload", self._driver.cuModuleUnload(module))

    def function(self, module: Any, name: str) -> Any:
        """The kernel ``name`` of a loaded module."""
        self._current()
        return _check(
            f"cuModuleGetFunction({name!r})",
            self._driver.cuModuleGetFunction(module, name.encode()),
        )

    def alloc(self, nbytes: int) -> int:
        """A device allocation of at least ``nbytes`` (at least 4 bytes: zero is refused)."""
        self._current()
        return int(
            _check(f"cuMemAlloc({nbytes:,} bytes)", self._driver.cuMemAlloc(max(4, int(nbytes))))
        )

    def free(self, ptr: int) -> None:
        self._current()
        _check("cuMemFree", self._driver.cuMemFree(int(ptr)))

    def upload(self, ptr: int, array: np.ndarray) -> None:
        """Copy the C-contiguous ``array`` to device memory at ``ptr`` (waits for it)."""
        host = np.ascontiguousarray(array)
        if host.nbytes:
            self._current()
            _check(
                "cuMemcpyHtoD",
                self._driver.cuMemcpyHtoD(int(ptr), host.ctypes.data, host.nbytes),
            )

    def download(self, ptr: int, array: np.ndarray) -> None:
        """Copy device memory at ``ptr`` into the C-contiguous, writeable ``array``."""
        if not (array.flags.c_contiguous and array.flags.writeable):
            raise CudaRuntimeError("download needs a C-contiguous, writeable array")
        if array.nbytes:
            self._current()
            _check(
                "cuMemcpyDtoH",
                self._driver.cuMemcpyDtoH(array.ctypes.data, int(ptr), array.nbytes),
            )

    def copy(self, dst: int, src: int, nbytes: int) -> None:
        """Device-to-device copy of ``nbytes``."""
        if nbytes:
            self._current()
            _check("cuMemcpyDtoD", self._driver.cuMemcpyDtoD(int(dst), int(src), int(nbytes)))

    def launch(
        self,
        function: Any,
        grid: Sequence[int],
        block: Sequence[int],
        args: Sequence[Any],
        shared_bytes: int = 0,
    ) -> None:
        """Launch ``function`` on the default stream (``grid`` and ``block`` of up to 3
        dims; ``args`` as ``pack_args`` takes them)."""
        self._current()
        g = (*map(int, grid), 1, 1, 1)[:3]
        b = (*map(int, block), 1, 1, 1)[:3]
        cells, addresses = pack_args(args)
        _check(
            "cuLaunchKernel",
            self._driver.cuLaunchKernel(
                function, *g, *b, int(shared_bytes), 0, addresses.ctypes.data, 0
            ),
        )
        del cells  # the driver copied the argument values at the launch

    def synchronize(self) -> None:
        """Wait for every launch and copy of this context (launch errors surface here)."""
        self._current()
        _check("cuCtxSynchronize", self._driver.cuCtxSynchronize())

    def pointer_device(self, ptr: int) -> int:
        """The ordinal of the GPU holding device pointer ``ptr``."""
        self._current()
        attr = self._driver.CUpointer_attribute.CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL
        return int(
            _check("cuPointerGetAttribute", self._driver.cuPointerGetAttribute(attr, int(ptr)))
        )


class PycudaDevice(Device):
    """The same interface over pycuda (used when pycuda is importable, as ``probe`` does)."""

    binding = "pycuda"

    def __init__(self, ordinal: int = 0) -> None:
        import pycuda.driver as drv

        self._drv = drv
        self.ordinal = ordinal
        try:
            drv.init()
            dev = drv.Device(ordinal)
            self.name = dev.name()
            major, minor = dev.compute_capability()
            self.arch = f"sm_{major}{minor}"
            self.memory = int(dev.total_memory())
            self._ctx = dev.retain_primary_context()
        except drv.Error as e:
            raise CudaRuntimeError(f"pycuda could not open GPU {ordinal}: {e}") from None
        self._allocations: dict[int, Any] = {}
        self._local = threading.local()
        self._current()

    def _call(self, what: str, fn: Any, *args: Any, **kwargs: Any) -> Any:
        self._current()
        try:
            return fn(*args, **kwargs)
        except self._drv.Error as e:
            raise CudaRuntimeError(f"the CUDA driver call {what} failed (pycuda): {e}") from None

    def _current(self) -> None:
        if getattr(self._local, "ready", False):
            return
        self._ctx.push()
        self._local.ready = True

    def load(self, image: bytes) -> Any:
        return self._call("cuModuleLoadData", self._drv.module_from_buffer, image)

    def unload(self, module: Any) -> None:
        pass  # pycuda unloads a module when it is garbage-collected

    def function(self, module: Any, name: str) -> Any:
        return self._call(f"cuModuleGetFunction({name!r})", module.get_function, name)

    def alloc(self, nbytes: int) -> int:
        buf = self._call(f"cuMemAlloc({nbytes:,} bytes)", self._drv.mem_alloc, max(4, nbytes))
        self._allocations[int(buf)] = buf
        return int(buf)

    def free(self, ptr: int) -> None:
        buf = self._allocations.pop(int(ptr), None)
        if buf is not None:
            self._call("cuMemFree", buf.free)

    def upload(self, ptr: int, array: np.ndarray) -> None:
        host = np.ascontiguousarray(array)
        if host.nbytes:
            self._call("cuMemcpyHtoD", self._drv.memcpy_htod, int(ptr), host)

    def download(self, ptr: int, array: np.ndarray) -> None:
        if not (array.flags.c_contiguous and array.flags.writeable):
            raise CudaRuntimeError("download needs a C-contiguous, writeable array")
        if array.nbytes:
            self._call("cuMemcpyDtoH", self._drv.memcpy_dtoh, array, int(ptr))

    def copy(self, dst: int, src: int, nbytes: int) -> None:
        if nbytes:
            self._call("cuMemcpyDtoD", self._drv.memcpy_dtod, int(dst), int(src), int(nbytes))

    def launch(
        self,
        function: Any,
        grid: Sequence[int],
        block: Sequence[int],
        args: Sequence[Any],
        shared_bytes: int = 0,
    ) -> None:
        cells, _ = pack_args(args)
        g = (*map(int, grid), 1, 1, 1)[:3]
        b = (*map(int, block), 1, 1, 1)[:3]
        values = [c[0] for c in cells]  # NumPy scalars: pycuda packs them by their type
        self._call("cuLaunchKernel", function, *values, grid=g, block=b, shared=int(shared_bytes))

    def synchronize(self) -> None:
        self._call("cuCtxSynchronize", self._drv.Context.synchronize)

    def pointer_device(self, ptr: int) -> int:
        return self.ordinal  # pycuda exposes no pointer query without a context switch


_DEVICES: dict[int, Device] = {}
_DEVICES_LOCK = threading.Lock()


def device(ordinal: int = 0) -> Device:
    """The runtime of GPU ``ordinal``, opened on first use (thread-safe): ``require()`` first,
    so a machine without a driver or GPU gets ``CudaUnavailableError``."""
    hit = _DEVICES.get(ordinal)
    if hit is not None:
        return hit
    with _DEVICES_LOCK:
        hit = _DEVICES.get(ordinal)
        if hit is None:
            found = require()
            hit = PycudaDevice(ordinal) if found.binding == "pycuda" else Device(ordinal)
            _DEVICES[ordinal] = hit
        return hit


def load(cubin: bytes) -> Any:
    """``device().load``: a module from a cubin."""
    return device().load(cubin)


def function(module: Any, name: str) -> Any:
    """``device().function``: a kernel of a loaded module."""
    return device().function(module, name)


def alloc(nbytes: int) -> int:
    """``device().alloc``: a device pointer to at least ``nbytes``."""
    return device().alloc(nbytes)


def free(ptr: int) -> None:
    """``device().free``."""
    device().free(ptr)


def upload(ptr: int, array: np.ndarray) -> None:
    """``device().upload``: host ``array`` to device memory at ``ptr``."""
    device().upload(ptr, array)


def download(ptr: int, array: np.ndarray) -> None:
    """``device().download``: device memory at ``ptr`` into host ``array``."""
    device().download(ptr, array)


def launch(
    function: Any,
    grid: Sequence[int],
    block: Sequence[int],
    args: Sequence[Any],
    shared_bytes: int = 0,
) -> None:
    """``device().launch``."""
    device().launch(function, grid, block, args, shared_bytes)


def synchronize() -> None:
    """``device().synchronize``."""
    device().synchronize()


# --------------------------------------------------------------------------------------------
# Device arrays of other libraries (``__cuda_array_interface__``: torch, CuPy, Numba...)
# --------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class DeviceArray:
    """What an object's ``__cuda_array_interface__`` says: its data pointer, shape, dtype
    and whether it is C-contiguous (``strides`` absent or dense row-major)."""

    ptr: int
    shape: tuple[int, ...]
    dtype: np.dtype[Any]
    contiguous: bool
    readonly: bool = False

    @property
    def nbytes(self) -> int:
        return int(np.prod(self.shape, dtype=np.int64)) * self.dtype.itemsize


def is_device_array(x: Any) -> bool:
    """``x`` exposes ``__cuda_array_interface__`` (and is no NumPy array). An object whose
    interface raises anything but ``AttributeError`` counts (torch raises ``TypeError`` for a
    bfloat16 CUDA tensor; ``device_array`` then names the problem), a CPU torch tensor does
    not (its property raises ``AttributeError``)."""
    if isinstance(x, np.ndarray):
        return False
    try:
        getattr(x, "__cuda_array_interface__")  # noqa: B009 - a property that may raise
    except AttributeError:
        return False
    except Exception:
        return True
    return True


def device_array(x: Any, what: str = "the array") -> DeviceArray:
    """Read ``x.__cuda_array_interface__`` (version 0-3): ``DTypeError`` for a type NumPy
    does not know or a masked array, without touching the device."""
    from ncd.errors import DTypeError

    try:
        cai = x.__cuda_array_interface__
    except Exception as e:  # torch raises for formats it cannot describe (bfloat16)
        raise DTypeError(
            f"{what} has no usable __cuda_array_interface__ ({e}). Fix: for a bfloat16 torch "
            "tensor pass t.view(torch.int16) (its bits), or pass a NumPy array."
        ) from None
    if cai.get("mask") is not None:
        raise DTypeError(f"{what} is a masked device array. Fix: pass a dense array.")
    try:
        dt = np.dtype(cai["typestr"])
    except TypeError:
        raise DTypeError(
            f"{what} has element type {cai['typestr']!r}, which NumPy does not know. Fix: "
            "pass float32, float64, float16, bfloat16 (as its 16 bits) or int64 data."
        ) from None
    shape = tuple(int(n) for n in cai["shape"])
    ptr, readonly = cai["data"]
    strides = cai.get("strides")
    contiguous = True
    if strides is not None:
        step = dt.itemsize
        for n, s in zip(reversed(shape), reversed(tuple(strides)), strict=True):
            if n != 1 and int(s) != step:
                contiguous = False
            step *= n
    return DeviceArray(int(ptr or 0), shape, dt, contiguous, bool(readonly))
