"""Axes as symbols and array types.

An axis is identified by a random uid, never by its name: the query and key axes of attention
may both be called ``seq`` and still differ. The uid also fixes the axis colour in diagrams.
"""

from __future__ import annotations

import colorsys
import math
import numbers
import os
import unicodedata
from collections.abc import Iterable
from typing import Any

import attrs

from ncd.dtypes import FORMATS, DType
from ncd.dtypes import dtype as to_dtype
from ncd.errors import DefinitionError

__all__ = [
    "DTYPES",
    "DTYPE_KINDS",
    "MAX_SIZE",
    "ArrayType",
    "Axis",
    "AxisLike",
    "axes",
    "check_name",
    "check_seed",
    "dtype_bytes",
    "show",
]

#: The largest size one axis may have (2^62): larger is a typo, and products of such sizes
#: overflow the 64-bit element counts every backend indexes with.
MAX_SIZE = 2**62

#: Element types a wire may carry, with their storage size in bytes (used by cost models); derived
#: from the table of formats in ``ncd.dtypes``.
DTYPES: dict[str, float] = {name: t.itemsize for name, t in FORMATS.items()}


#: dtype -> its kind; a wire of one kind never feeds an op input of another (no silent casts).
DTYPE_KINDS: dict[str, str] = {name: t.kind for name, t in FORMATS.items()}


def dtype_bytes(dtype: object) -> float:
    """Bytes per element of ``dtype`` (a format, its name or a NumPy type); an unknown one is an
    ``UnknownDTypeError`` listing the formats."""
    return to_dtype(dtype).itemsize


def _new_uid() -> str:
    return os.urandom(4).hex()


def _bad_char(text: str) -> str | None:
    """The first control character (or lone surrogate) in ``text``, as ``U+XXXX``."""
    for ch in text:
        if unicodedata.category(ch) in ("Cc", "Cs"):
            return f"U+{ord(ch):04X}"
    return None


def show(value: object) -> str:
    """``value`` as a message quotes it: its repr, cut to 60 characters; an int past 2^64 by its
    number of digits (Python refuses to print one of more than 4300)."""
    if isinstance(value, int) and not isinstance(value, bool) and value.bit_length() > 64:
        try:
            digits = str(len(str(abs(value))))
        except ValueError:  # past sys.get_int_max_str_digits()
            digits = f"about {round(value.bit_length() * math.log10(2))}"
        return f"an int of {digits} digits"
    text = repr(value)
    return text if len(text) <= 60 else text[:57] + "..."


def check_name(what: str, value: object, *, empty: bool = False) -> None:
    """Raise ``DefinitionError`` unless ``value`` is a string without control characters (and
    non-empty unless ``empty``): names end up in parameter paths, diagrams and messages."""
    if not isinstance(value, str) or (not value and not empty):
        kind = "a string" if empty else "a non-empty string"
        raise DefinitionError(f"{what} must be {kind}, got {show(value)}. Fix: pass {kind}.")
    bad = _bad_char(value)
    if bad is not None:
        raise DefinitionError(
            f"{what} {value!r} contains the control character {bad}. Fix: use printable "
            "characters only."
        )


def check_seed(seed: object, what: str) -> int:
    """``seed`` if it is an int >= 0, else a ``DefinitionError`` for ``what``."""
    if isinstance(seed, bool) or not isinstance(seed, numbers.Integral) or int(seed) < 0:
        raise DefinitionError(
            f"{what}: seed must be an int >= 0, got {show(seed)}. Fix: pass e.g. seed=0."
        )
    return int(seed)


def _check_axis_name(_: Any, attribute: Any, value: str) -> None:
    check_name(f"an axis {attribute.name}", value)


def _check_size(_: Any, __: Any, value: int | None) -> None:
    if value is None:
        return
    if isinstance(value, bool) or not isinstance(value, int):
        raise DefinitionError(
            f"an axis size must be a positive int or None, got {value!r} "
            f"({type(value).__name__}). Fix: pass an int, e.g. size=int(n)."
        )
    if not 1 <= value <= MAX_SIZE:
        raise DefinitionError(
            f"an axis size must lie in [1, 2^62], got {show(value)}. Fix: pass the size the axis "
            "really has (None leaves it free)."
        )


@attrs.frozen(eq=False, repr=False)
class Axis:
    """A named symbol with a random uid and an optional size (``None`` means free)."""

    name: str = attrs.field(validator=_check_axis_name)
    uid: str = attrs.field(factory=_new_uid, kw_only=True, validator=_check_axis_name)
    size: int | None = attrs.field(default=None, kw_only=True, validator=_check_size)

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Axis) and other.uid == self.uid

    def __hash__(self) -> int:
        return hash(self.uid)

    def __repr__(self) -> str:
        size = "" if self.size is None else f", size={self.size}"
        return f"Axis({self.name!r}, uid={self.uid!r}{size})"

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
        hue = (
            int(self.uid[:6], 16) / float(0xFFFFFF) if _is_hex(self.uid[:6]) else _hash01(self.uid)
        )
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


def axis_arg(default: str, value: Axis | int | str | None) -> Axis:
    """The axis a model builder's argument names: an ``Axis`` as it is, an int size (a new axis
    ``default`` of that size), a name, or ``None`` (a new axis ``default``); a
    ``DefinitionError`` naming the argument otherwise."""
    if isinstance(value, Axis):
        return value
    if isinstance(value, bool) or not isinstance(value, int | str | None):
        raise DefinitionError(
            f"{default}: expected an Axis, an int size or a name, got {show(value)}. Fix: pass "
            f"e.g. {default}=64 or {default}=ncd.Axis({default!r})."
        )
    return Axis(default, size=value) if isinstance(value, int) else Axis(value or default)


def axes(spec: str | Iterable[str], **sizes: int) -> tuple[Axis, ...]:
    """Make several fresh axes: ``q, x, d = ncd.axes("q x d", d=64)``."""
    if isinstance(spec, str):
        names = spec.split()
    elif isinstance(spec, Iterable):
        names = list(spec)
    else:
        raise DefinitionError(
            f"ncd.axes takes names like 'q x d', got {show(spec)}. Fix: pass a string."
        )
    unknown = set(sizes) - set(names)
    if unknown:
        raise DefinitionError(
            f"sizes given for axes not in {names}: {sorted(unknown)}. Fix: name each sized axis "
            "in the spec."
        )
    return tuple(Axis(n, size=sizes.get(n)) for n in names)


def _to_axes(value: Iterable[Axis]) -> tuple[Axis, ...]:
    if not isinstance(value, Iterable) or isinstance(value, str):
        raise DefinitionError(
            f"array type axes must be a sequence of Axis, got {show(value)}. Fix: pass e.g. (q, d)."
        )
    return tuple(value)


def _distinct(_: Any, __: Any, value: tuple[Axis, ...]) -> None:
    for a in value:
        if not isinstance(a, Axis):
            raise DefinitionError(
                f"array type axes must be Axis objects, got {show(a)}. Fix: make them with "
                "ncd.Axis or ncd.axes."
            )
    if len(set(value)) != len(value):
        dup = [a.describe() for a in value if value.count(a) > 1]
        raise DefinitionError(
            f"an array type's axes must be distinct; repeated: {sorted(set(dup))}. Fix: use a "
            "second axis (e.g. ops.rename) for the second dimension."
        )


@attrs.frozen
class ArrayType:
    """An ordered tuple of distinct axes and an element type."""

    axes: tuple[Axis, ...] = attrs.field(converter=_to_axes, validator=_distinct)
    dtype: DType = attrs.field(default=FORMATS["float32"], converter=to_dtype)

    def __str__(self) -> str:
        return f"[{' '.join(a.name for a in self.axes)}]" + (
            "" if self.dtype == "float32" else f":{self.dtype}"
        )

    @property
    def is_float(self) -> bool:
        return self.dtype.kind == "float"
