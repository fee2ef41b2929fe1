"""Axes as symbols and array types.

An axis is identified by a random uid, never by its name: the query and key axes of attention
may both be called ``seq`` and still differ. The uid also fixes the axis colour in diagrams.
"""

from __future__ import annotations

import colorsys
import os
from collections.abc import Iterable
from typing import Any

import attrs

__all__ = ["DTYPES", "ArrayType", "Axis", "AxisLike", "axes", "dtype_bytes"]

#: Element types a wire may carry, with their storage size in bytes (used by cost models).
DTYPES: dict[str, float] = {
    "float64": 8,
    "float32": 4,
    "float16": 2,
    "bfloat16": 2,
    "float8": 1,
    "int64": 8,
    "int32": 4,
    "bool": 1,
}


def dtype_bytes(dtype: str) -> float:
    """Bytes per element of ``dtype``."""
    return DTYPES[dtype]


def _new_uid() -> str:
    return os.urandom(4).hex()


def _check_name(_: Any, __: Any, value: str) -> None:
    if not isinstance(value, str) or not value:
        raise TypeError(f"an axis name must be a non-empty string, got {value!r}")


def _check_size(_: Any, __: Any, value: int | None) -> None:
    if value is not None and (isinstance(value, bool) or not isinstance(value, int) or value < 1):
        raise ValueError(f"an axis size must be a positive int or None, got {value!r}")


@attrs.frozen(eq=False, repr=False)
class Axis:
    """A named symbol with a random uid and an optional size (``None`` means free)."""

    name: str = attrs.field(validator=_check_name)
    uid: str = attrs.field(factory=_new_uid, kw_only=True)
    size: int | None = attrs.field(default=None, kw_only=True, validator=_check_size)

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Axis) and other.uid == self.uid

    def __hash__(self) -> int:
        return hash(self.uid)

    def __repr__(self) -> str:
        return f"Axis({self.name!r}, uid={self.uid!r}{'' if self.size is None else f', size={self.size}'})"

    @property
    def ref(self) -> str:
        """``name#uid``: how messages name this axis."""
        return f"{self.name}#{self.uid}"

    def describe(self) -> str:
        """``name#uid (size)`` with ``?`` for a free size."""
        return f"{self.ref} ({'?' if self.size is None else self.size})"

    @property
    def colour(self) -> str:
        """A stable ``#rrggbb`` colour derived from the uid (its hue)."""
        hue = int(self.uid[:6], 16) / float(0xFFFFFF) if _is_hex(self.uid[:6]) else _hash01(self.uid)
        r, g, b = colorsys.hls_to_rgb(hue, 0.45, 0.65)
        return f"#{int(r * 255):02x}{int(g * 255):02x}{int(b * 255):02x}"

    def with_size(self, size: int | None) -> Axis:
        """The same axis (same uid) carrying ``size``."""
        return attrs.evolve(self, size=size)


def _is_hex(text: str) -> bool:
    return len(text) > 0 and all(c in "0123456789abcdef" for c in text.lower())


def _hash01(text: str) -> float:
    h = 2166136261
    for ch in text.encode():
        h = ((h ^ ch) * 16777619) & 0xFFFFFFFF
    return h / float(0xFFFFFFFF)


AxisLike = Axis | str


def axes(spec: str | Iterable[str], **sizes: int) -> tuple[Axis, ...]:
    """Make several fresh axes: ``q, x, d = ncd.axes("q x d", d=64)``."""
    names = spec.split() if isinstance(spec, str) else list(spec)
    unknown = set(sizes) - set(names)
    if unknown:
        raise ValueError(f"sizes given for axes not in {names}: {sorted(unknown)}")
    return tuple(Axis(n, size=sizes.get(n)) for n in names)


def _to_axes(value: Iterable[Axis]) -> tuple[Axis, ...]:
    return tuple(value)


def _distinct(_: Any, __: Any, value: tuple[Axis, ...]) -> None:
    for a in value:
        if not isinstance(a, Axis):
            raise TypeError(f"array type axes must be Axis objects, got {a!r}")
    if len(set(value)) != len(value):
        dup = [a.ref for a in value if value.count(a) > 1]
        raise ValueError(f"an array type's axes must be distinct; repeated: {sorted(set(dup))}")


def _check_dtype(_: Any, __: Any, value: str) -> None:
    if value not in DTYPES:
        raise ValueError(f"unknown dtype {value!r}; known: {', '.join(DTYPES)}")


@attrs.frozen
class ArrayType:
    """An ordered tuple of distinct axes and an element type."""

    axes: tuple[Axis, ...] = attrs.field(converter=_to_axes, validator=_distinct)
    dtype: str = attrs.field(default="float32", validator=_check_dtype)

    def __str__(self) -> str:
        return f"[{' '.join(a.name for a in self.axes)}]" + ("" if self.dtype == "float32" else f":{self.dtype}")

    @property
    def is_float(self) -> bool:
        return self.dtype.startswith(("float", "bfloat"))
