"""Element formats as values: ``ncd.float32``, ``ncd.bfloat16``, ``ncd.int64``...

A ``DType`` is an interned, frozen ``str`` subclass whose value is its name, so every place that
compared, keyed or wrote dtypes as strings (``t.dtype == "float32"``, JSON, golden files) keeps
working, while each value also knows its item size, its NumPy dtype (``ml_dtypes`` for bfloat16
and the float8 formats) and the format it accumulates in. ``dtype(x)`` turns a name, a NumPy or
ml_dtypes type, a torch dtype or a ``DType`` into the one interned value.
"""

from __future__ import annotations

from typing import Any, Literal

import numpy as np

from ncd.errors import DTypeError, UnknownDTypeError

__all__ = [
    "ALIASES",
    "FORMATS",
    "DType",
    "bfloat16",
    "bool_",
    "dtype",
    "float8_e4m3",
    "float8_e4m3fn",
    "float8_e5m2",
    "float16",
    "float32",
    "float64",
    "int32",
    "int64",
]

Kind = Literal["float", "int", "bool"]


class DType(str):
    """One element format. Equal to (and hashed as) its name; frozen; one object per name.

    ``name`` the format's name, ``itemsize`` bytes per element, ``numpy`` the NumPy dtype arrays
    of this format have, ``kind`` ``float``, ``int`` or ``bool``, ``accumulate`` the format sums
    and other reductions run in (the reference interpreter computes every op in it).
    """

    name: str
    itemsize: int
    kind: Kind
    _accumulate: str
    _numpy: Any  # a NumPy type, or the name of an ml_dtypes type (imported on first use)

    def __new__(cls, name: str, numpy: Any, itemsize: int, kind: Kind, accumulate: str) -> DType:
        if name in FORMATS:
            raise DTypeError(f"the format {name!r} exists already. Fix: use ncd.dtype({name!r}).")
        self = super().__new__(cls, name)
        for key, value in (
            ("name", name),
            ("itemsize", itemsize),
            ("kind", kind),
            ("_accumulate", accumulate),
            ("_numpy", numpy),
        ):
            object.__setattr__(self, key, value)
        FORMATS[name] = self
        return self

    @property
    def numpy(self) -> np.dtype[Any]:
        """The NumPy dtype of arrays in this format (ml_dtypes' for bfloat16 and float8, imported
        the first time one is asked for: ``import ncd`` stays light)."""
        spec = self._numpy
        if isinstance(spec, np.dtype):
            return spec
        if isinstance(spec, str):
            import ml_dtypes

            spec = getattr(ml_dtypes, spec)
        found: np.dtype[Any] = np.dtype(spec)
        object.__setattr__(self, "_numpy", found)
        return found

    def __setattr__(self, key: str, value: Any) -> None:
        raise AttributeError(f"ncd.{self.name} is frozen: its {key} cannot be set")

    def __delattr__(self, key: str) -> None:
        raise AttributeError(f"ncd.{self.name} is frozen: its {key} cannot be deleted")

    def __repr__(self) -> str:
        return f"ncd.{self.name}"

    # Interned: copies and pickles come back as the same object.
    def __reduce__(self) -> tuple[Any, tuple[str]]:
        return dtype, (self.name,)

    def __copy__(self) -> DType:
        return self

    def __deepcopy__(self, memo: Any) -> DType:
        return self

    @property
    def accumulate(self) -> DType:
        """The format this one accumulates in (bf16/fp16/fp8 -> float32; ints -> int64)."""
        return FORMATS[self._accumulate]

    @property
    def is_float(self) -> bool:
        return self.kind == "float"

    @property
    def reduced(self) -> bool:
        """A float format narrower than its accumulation type (bf16, fp16, fp8): the reference
        interpreter upcasts it before computing and rounds back to it after."""
        return self.kind == "float" and self._accumulate != self.name

    @property
    def eps(self) -> float:
        """The gap between 1 and the next value (machine epsilon); 0 for integer formats."""
        if self.kind != "float":
            return 0.0
        import ml_dtypes

        return float(ml_dtypes.finfo(self.numpy).eps)  # type: ignore[no-untyped-call]


#: name -> format: the table every lookup reads (filled in by ``DType.__new__``).
FORMATS: dict[str, DType] = {}

float64 = DType("float64", np.float64, 8, "float", "float64")
float32 = DType("float32", np.float32, 4, "float", "float32")
float16 = DType("float16", np.float16, 2, "float", "float32")
bfloat16 = DType("bfloat16", "bfloat16", 2, "float", "float32")
# Every name is the NumPy / ml_dtypes name of the same format, so ``np.dtype(ncd.float8_e4m3)``
# (which NumPy reads as the string it is, once ml_dtypes is imported) means the same format as
# ``ncd.float8_e4m3.numpy``.
float8_e4m3 = DType("float8_e4m3", "float8_e4m3", 1, "float", "float32")  # IEEE: inf, max 240
# The OCP / NVIDIA e4m3 (no inf, max 448, overflow is NaN): torch's float8_e4m3fn.
float8_e4m3fn = DType("float8_e4m3fn", "float8_e4m3fn", 1, "float", "float32")
float8_e5m2 = DType("float8_e5m2", "float8_e5m2", 1, "float", "float32")
int64 = DType("int64", np.int64, 8, "int", "int64")
int32 = DType("int32", np.int32, 4, "int", "int64")
bool_ = DType("bool", np.bool_, 1, "bool", "int64")

#: other spellings of a format: ``float8`` (the cost model's name for 8-bit floats) is e4m3.
ALIASES: dict[str, DType] = {"float8": float8_e4m3}


def dtype(value: object) -> DType:
    """The interned format of ``value``: a ``DType``, a name (``"bfloat16"``), a NumPy or
    ml_dtypes type or dtype (``np.float16``, ``ml_dtypes.bfloat16``) or a torch dtype.
    Anything else is a ``DTypeError`` listing the formats."""
    if isinstance(value, DType):
        return value
    if isinstance(value, str):
        found = FORMATS.get(value) or ALIASES.get(value)
        if found is not None:
            return found
    elif type(value).__module__ == "torch":  # torch.bfloat16 and friends, without importing it
        name = str(value).removeprefix("torch.")
        found = FORMATS.get(name) or ALIASES.get(name)
        if found is not None:
            return found
    elif value is not None and not isinstance(value, bool | int | float):
        try:
            np_dtype = np.dtype(value)  # type: ignore[call-overload]
        except (TypeError, ValueError):
            np_dtype = None
        # by name, then checked: an ml_dtypes type is only met once ml_dtypes is imported
        found = FORMATS.get(np_dtype.name) if np_dtype is not None else None
        if found is not None and found.numpy == np_dtype:
            return found
    raise UnknownDTypeError(
        f"unknown element format {_show(value)}. Fix: use one of {', '.join(FORMATS)} "
        "(ncd.bfloat16, ncd.dtype('float16'), ncd.dtype(np.float16), "
        "ncd.dtype(ml_dtypes.bfloat16))."
    )


def _show(value: object) -> str:
    from ncd.axis import show  # ncd.axis imports this module

    return show(value)
