"""The cuda backend without a GPU: registration, the typed error naming what is missing, input
checks before any device work, and the host side of a call (buffers, argument packing, launch
shapes) against a recording fake of the device runtime."""

from __future__ import annotations

import ctypes
import math
import re
from typing import Any

import ml_dtypes
import numpy as np
import pytest

import ncd
import ncd_cuda
from ncd import nn, ops
from ncd.errors import DTypeError, NcdError, SizeError
from ncd.testing import case_by_name
from ncd_cuda import runtime
from ncd_cuda.backend import CudaBackend, launch_shape

ON_GPU = runtime.probe().ok
no_gpu = pytest.mark.skipif(ON_GPU, reason="a GPU is here: the call runs instead of refusing")


def attention() -> Any:
    return nn.attention(causal=True).over("h").bind(h=4, q=1000, x=1000, d=64, v=64)


def test_backend_is_registered() -> None:
    assert "cuda" in ncd.plugins.registry().backends
    assert isinstance(ncd.plugins.registry().backend("cuda"), CudaBackend)
    assert {"plan", "gpu", "float64"} <= CudaBackend.capabilities


def test_the_backend_says_whether_it_can_run_here() -> None:
    why = ncd.plugins.registry().backend("cuda").unavailable()
    assert (why is None) == ON_GPU
    if why is not None:
        assert why == runtime.probe().missing and "Fix:" in why
    assert ncd.plugins.registry().backend("reference").unavailable() is None


def test_compile_needs_no_gpu() -> None:
    exe = ncd.compile(attention(), "cuda")
    assert callable(exe) and exe.builds == 0


@no_gpu
def test_call_without_a_gpu_names_the_missing_driver_and_the_fix() -> None:
    exe = ncd.compile(attention(), "cuda")
    x = np.zeros((4, 1000, 64), np.float32)
    with pytest.raises(ncd_cuda.CudaUnavailableError) as info:
        exe(x, x, x)
    assert isinstance(info.value, NcdError)
    text = str(info.value)
    assert "driver" in text and "Fix:" in text
    missing = runtime.probe().missing or ""
    assert missing in text


@pytest.mark.parametrize(
    "shapes",
    [[(4, 1000, 64), (4, 1000, 64), (4, 1000, 63)], [(4, 1000, 64), (4, 1000, 64)]],
    ids=["wrong-shape", "missing-input"],
)
def test_bad_inputs_are_refused_before_the_device_check(shapes: list[Any]) -> None:
    exe = ncd.compile(attention(), "cuda")
    with pytest.raises(SizeError):
        exe(*[np.zeros(s, np.float32) for s in shapes])


def test_a_dtype_that_would_round_is_refused_before_the_device_check() -> None:
    exe = ncd.compile(attention().cast(ncd.bfloat16), "cuda")
    x = np.zeros((4, 1000, 64), np.float32)
    with pytest.raises(DTypeError):
        exe(x, x, x)


def test_bad_params_are_refused_before_the_device_check() -> None:
    model = case_by_name("mlp").model
    exe = ncd.compile(model, "cuda")
    xs = case_by_name("mlp").inputs()
    with pytest.raises(ncd.errors.ParameterError):
        exe(*xs, params={})


def test_unknown_options_are_refused() -> None:
    with pytest.raises(ncd.errors.DefinitionError, match="unknown option"):
        ncd.compile(attention(), "cuda", fuse=False)


def test_plan_is_the_cuda_plan() -> None:
    plan = ncd.plan(attention(), target="cuda")
    assert plan.target == "cuda"
    assert len(plan.kernels) == 1 and plan.kernels[0].streamed


def test_driver_errors_name_the_call_and_the_error() -> None:
    driver = pytest.importorskip("cuda.bindings.driver")
    err = driver.CUresult.CUDA_ERROR_OUT_OF_MEMORY
    with pytest.raises(runtime.CudaRuntimeError, match=r"cuMemAlloc.*CUDA_ERROR_OUT_OF_MEMORY"):
        runtime._check("cuMemAlloc(4 bytes)", (err, 0))
    assert issubclass(runtime.CudaRuntimeError, NcdError)
    assert runtime._check("cuMemAlloc", (driver.CUresult.CUDA_SUCCESS, 1234)) == 1234


def test_kernel_params_are_addresses_of_typed_values() -> None:
    _cells, addresses = runtime.pack_args(  # the cells must outlive the reads
        [(0xDEADBEEF000, "ptr"), (7, "int"), (2**40, "long long"), np.int32(-3)]
    )
    assert addresses.dtype == np.uint64 and len(addresses) == 4
    assert ctypes.c_uint64.from_address(int(addresses[0])).value == 0xDEADBEEF000
    assert ctypes.c_int32.from_address(int(addresses[1])).value == 7
    assert ctypes.c_int64.from_address(int(addresses[2])).value == 2**40
    assert ctypes.c_int32.from_address(int(addresses[3])).value == -3
    with pytest.raises(ncd.errors.DefinitionError):
        runtime.pack_args([7])


@pytest.mark.parametrize(
    ("total", "local", "grid", "block"),
    [
        ((13,), None, (1,), (13,)),
        ((1024,), None, (1,), (1024,)),
        ((1025,), None, (5,), (256,)),
        ((4000,), (128,), (32,), (128,)),
        ((4001,), (128,), (32,), (128,)),
        ((0,), None, (0,), (1,)),
    ],
)
def test_launch_shape(total: Any, local: Any, grid: Any, block: Any) -> None:
    assert launch_shape(total, local) == (grid, block)


# -- device arrays (__cuda_array_interface__) -------------------------------------------------


class FakeCudaArray:
    """An object that describes device memory it does not own (nothing reads it here)."""

    def __init__(self, shape: Any, typestr: str, ptr: int = 0x7F0000000000, strides: Any = None):
        self.__cuda_array_interface__ = {
            "shape": tuple(shape),
            "typestr": typestr,
            "data": (ptr, False),
            "strides": strides,
            "version": 3,
        }


def test_device_arrays_are_read_from_their_interface() -> None:
    d = runtime.device_array(FakeCudaArray((2, 3), "<f4", strides=(12, 4)))
    assert d.shape == (2, 3) and d.dtype == np.float32 and d.contiguous and d.nbytes == 24
    assert not runtime.device_array(FakeCudaArray((2, 3), "<f4", strides=(4, 8))).contiguous
    assert runtime.is_device_array(FakeCudaArray((1,), "<f4"))
    assert not runtime.is_device_array(np.zeros(3))


def test_a_device_array_of_another_dtype_is_refused_before_device_work() -> None:
    exe = ncd.compile(ops.softmax("x").over("r").bind(r=7, x=13), "cuda")
    with pytest.raises(DTypeError):
        exe(FakeCudaArray((7, 13), "<f8"))


def test_a_strided_device_array_is_refused_before_device_work() -> None:
    exe = ncd.compile(ops.softmax("x").over("r").bind(r=7, x=13), "cuda")
    with pytest.raises(SizeError, match="C-contiguous"):
        exe(FakeCudaArray((7, 13), "<f4", strides=(4, 28)))


def test_a_device_array_of_the_wrong_shape_is_refused_before_device_work() -> None:
    exe = ncd.compile(ops.softmax("x").over("r").bind(r=7, x=13), "cuda")
    with pytest.raises(SizeError):
        exe(FakeCudaArray((7, 12), "<f4"))


# -- the host side of a call, against a recording fake device ---------------------------------


class FakeDevice:
    """Records what the backend asks of a GPU; checks each launch's arguments against the
    kernel's C signature. Downloads fill outputs with a marker value."""

    binding = "fake"
    arch = "sm_90"
    name = "fake GPU"
    ordinal = 0

    def __init__(self) -> None:
        self.next = 0x100000
        self.live: dict[int, int] = {}
        self.uploads: list[tuple[int, np.ndarray]] = []
        self.launches: list[tuple[str, tuple[int, ...], tuple[int, ...], list[Any]]] = []
        self.signatures: dict[str, int] = {}
        self.synced = 0

    def load(self, image: bytes) -> Any:
        assert image[:4] == b"\x7fELF"
        return image

    def function(self, module: Any, name: str) -> Any:
        return name

    def alloc(self, nbytes: int) -> int:
        ptr, self.next = self.next, self.next + max(4, nbytes) + 256
        self.live[ptr] = nbytes
        return ptr

    def free(self, ptr: int) -> None:
        del self.live[ptr]

    def upload(self, ptr: int, array: np.ndarray) -> None:
        self.uploads.append((ptr, np.array(array)))

    def download(self, ptr: int, array: np.ndarray) -> None:
        array[...] = 1

    def copy(self, dst: int, src: int, nbytes: int) -> None:
        pass

    def launch(self, fn: Any, grid: Any, block: Any, args: Any, shared_bytes: int = 0) -> None:
        self.launches.append((fn, tuple(grid), tuple(block), list(args)))

    def synchronize(self) -> None:
        self.synced += 1

    def pointer_device(self, ptr: int) -> int:
        return 0


@pytest.fixture
def fake(monkeypatch: pytest.MonkeyPatch) -> FakeDevice:
    pytest.importorskip("cuda.bindings.nvrtc")
    dev = FakeDevice()
    monkeypatch.setattr(runtime, "require", lambda: runtime.Probe("fake", (("fake", "sm_90"),)))
    monkeypatch.setattr(runtime, "device", lambda ordinal=0: dev)
    return dev


def _arity(source: str, name: str) -> int:
    m = re.search(rf"\b{name}\((.*?)\)\s*\{{", source, re.S)
    assert m, name
    return len([p for p in m.group(1).split(",") if p.strip()])


@pytest.mark.parametrize("name", ["softmax_13", "mlp", "gpt_2_layers", "attention_causal_lifted"])
def test_a_call_launches_every_kernel_with_its_arguments(fake: FakeDevice, name: str) -> None:
    case = case_by_name(name)
    exe = ncd.compile(case.model, "cuda")
    got = exe(*case.inputs(), params=case.params())
    got = list(got) if isinstance(got, tuple) else [got]
    for g, w in zip(got, case.expected(), strict=True):
        assert g.shape == w.shape and np.all(g == 1)  # downloaded (the fake writes ones)
    built = exe.compiled(ncd.reference.prepare(case.model, case.inputs(), case.params())[0])
    assert [n for n, *_ in fake.launches] == [s.name for s in built.launches]
    for fn, grid, block, args in fake.launches:
        kernel = built.kernel(fn)
        assert len(args) == _arity(kernel.source, fn)
        assert all(isinstance(a, tuple) and a[1] in runtime.ARG_TYPES for a in args)
        assert all(n >= 1 for n in grid) and math.prod(block) <= 1024
    assert len(fake.live) == len(case.params())  # temporaries freed; parameters stay
    uploads = len(fake.uploads)
    fake.launches.clear()
    exe(*case.inputs(), params=case.params())  # same bits: parameters are not uploaded again
    assert len(fake.uploads) - uploads == len(case.model.graph.inputs)
    assert exe.builds == 1 and fake.synced == 2


def test_device_arrays_are_used_in_place(fake: FakeDevice) -> None:
    model = ops.softmax("x").over("r").bind(r=7, x=13)
    exe = ncd.compile(model, "cuda")
    x, y = FakeCudaArray((7, 13), "<f4", ptr=0x5000), FakeCudaArray((7, 13), "<f4", ptr=0x9000)
    result = exe(x, out=y)
    assert result is y
    (launch,) = fake.launches
    assert [a[0] for a in launch[3][:2]] == [0x5000, 0x9000]
    assert fake.uploads == [] and fake.live == {}


def test_bfloat16_device_arrays_may_be_given_as_their_bits(fake: FakeDevice) -> None:
    model = ops.softmax("x").over("r").bind(r=7, x=13).cast(ncd.bfloat16)
    out = ncd.compile(model, "cuda")(FakeCudaArray((7, 13), "<i2", ptr=0x5000))
    assert out.dtype == ml_dtypes.bfloat16 and out.shape == (7, 13)


def test_out_must_match_the_output(fake: FakeDevice) -> None:
    model = ops.softmax("x").over("r").bind(r=7, x=13)
    exe = ncd.compile(model, "cuda")
    x = np.zeros((7, 13), np.float32)
    with pytest.raises(SizeError):
        exe(x, out=np.zeros((7, 13), np.float64))
    with pytest.raises(SizeError, match="shares memory"):
        exe(x, out=x)
    out = np.zeros((7, 13), np.float32)
    assert exe(x, out=out) is out and np.all(out == 1)
