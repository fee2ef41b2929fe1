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
from ncd.codegen.dialect import C_TYPES
from ncd.errors import ScheduleError

__all__ = ["CTYPES", "Buffer", "Layouts", "row_major"]

#: ncd dtype -> C element type: the default dialect's table (``Dialect.ctypes`` is what the
#: generator reads; kept here for callers of the old name).
CTYPES = C_TYPES

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
    its axes in storage order with their strides, its C element type and its ncd format (the
    generator fills both from the dialect; the defaults serve buffers made by hand in tests)."""

    name: str
    axes: tuple[Axis, ...]
    strides: tuple[int, ...]
    ctype: str = "float"  # a default for hand-made buffers only; the generator asks the dialect
    value: int | None = None
    param: str | None = None
    output: bool = False
    dtype: str = "float32"

    @property
    def size(self) -> int:
        """Number of elements (dense)."""
        if not self.axes:
            return 1
        return int(self.strides[0]) * int(self.axes[0].size or 1) if self.strides else 1

    def stride(self, axis: Axis) -> int:
        return self.strides[self.axes.index(axis)]

    @property
    def repeats(self) -> bool:
        """An axis appears twice (a ``linear("d -> d")`` weight over ``(d, d)``): indexing by
        axis would read the diagonal, so such a buffer is addressed by position only."""
        return len(set(self.axes)) != len(self.axes)

    def address(self, index: Mapping[Axis, str]) -> str:
        """The element offset for index expressions given by axis."""
        if self.repeats:
            raise ScheduleError(
                f"buffer {self.name} repeats an axis ({', '.join(a.describe() for a in self.axes)})"
                " and was addressed by axis; this is a code generation bug. Fix: address it by "
                "position (Buffer.address_at)"
            )
        missing = [a for a in self.axes if a not in index]
        if missing:
            raise ScheduleError(
                f"buffer {self.name} is read without an index for axis {missing[0].describe()}"
            )
        return self.address_at([index[a] for a in self.axes])

    def address_at(self, exprs: Sequence[str]) -> str:
        """The element offset for one index expression per storage position."""
        if len(exprs) != len(self.axes):
            raise ScheduleError(
                f"buffer {self.name} has {len(self.axes)} axes, addressed with "
                f"{len(exprs)} index expressions (a code generation bug)"
            )
        terms = []
        for e, s in zip(exprs, self.strides, strict=True):
            if e == "0":
                continue
            terms.append(e if s == 1 else f"{_paren(e)} * {s}")
        return " + ".join(terms) or "0"


def _paren(e: str) -> str:
    return e if e.isidentifier() or e.isdigit() else f"({e})"


def nbytes(buf: Buffer) -> int:
    """Bytes of a dense buffer, at its format's item size."""
    from ncd.dtypes import dtype as to_dtype

    return math.prod(a.size or 1 for a in buf.axes) * to_dtype(buf.dtype).itemsize
