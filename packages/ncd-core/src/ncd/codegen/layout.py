"""Memory layouts of the arrays a kernel reads and writes.

Every buffer is dense and row-major in *some* order of its axes; generated code addresses it
only through ``Buffer.address`` (index expressions by ``Axis``), so a backend may store an
intermediate value in whatever axis order suits its consumers.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence

import attrs

from ncd.axis import Axis
from ncd.errors import ScheduleError

__all__ = ["CTYPES", "Buffer", "Layouts", "row_major"]

#: ncd dtype -> C element type.
CTYPES = {"float32": "float", "float64": "double", "int64": "long", "int32": "int"}

#: value id -> the axis order it is stored in (a permutation of the value's axes).
Layouts = Mapping[int, tuple[Axis, ...]]


def row_major(axes: Sequence[Axis], sizes: Mapping[Axis, int]) -> tuple[int, ...]:
    """Element strides of a dense array whose last axis varies fastest."""
    strides = []
    step = 1
    for a in reversed(axes):
        strides.append(step)
        step *= sizes[a]
    return tuple(reversed(strides))


@attrs.frozen
class Buffer:
    """A kernel argument: ``name`` in source, what it holds (a value id or a parameter name),
    its axes in storage order with their strides, and its C element type."""

    name: str
    axes: tuple[Axis, ...]
    strides: tuple[int, ...]
    ctype: str = "float"
    value: int | None = None
    param: str | None = None
    output: bool = False

    @property
    def size(self) -> int:
        """Number of elements (dense)."""
        if not self.axes:
            return 1
        return int(self.strides[0]) * int(self.axes[0].size or 1) if self.strides else 1

    def stride(self, axis: Axis) -> int:
        return self.strides[self.axes.index(axis)]

    def address(self, index: Mapping[Axis, str]) -> str:
        """The element offset for index expressions given by axis."""
        terms = []
        for a, s in zip(self.axes, self.strides, strict=True):
            if a not in index:
                raise ScheduleError(
                    f"buffer {self.name} is read without an index for axis {a.describe()}"
                )
            e = index[a]
            if e == "0":
                continue
            terms.append(e if s == 1 else f"{_paren(e)} * {s}")
        return " + ".join(terms) or "0"


def _paren(e: str) -> str:
    return e if e.isidentifier() or e.isdigit() else f"({e})"


def nbytes(buf: Buffer, itemsize: Mapping[str, int]) -> int:
    return math.prod(a.size or 1 for a in buf.axes) * itemsize.get(buf.ctype, 4)
