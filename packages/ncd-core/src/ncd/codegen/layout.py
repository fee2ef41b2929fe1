"""Memory layouts of the arrays a kernel reads and writes.

Every buffer is dense and row-major in *some* order of its axes; generated code addresses it
only through ``Buffer.address`` (index expressions by ``Axis``), so a backend may store an
intermediate value in whatever axis order suits its consumers. A size left free until run time
is a ``Dim``: an integer expression over the kernel's size arguments, rendered as C and
evaluated on the host per call.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence

import attrs

from ncd.axis import Axis
from ncd.codegen.dialect import C_TYPES
from ncd.codegen.ir import Const, Expr, Raw, as_expr
from ncd.errors import ScheduleError

__all__ = ["CTYPES", "Buffer", "Dim", "Layouts", "Size", "ceil_div", "evaluate", "row_major"]

#: ncd dtype -> C element type: the default dialect's table (``Dialect.ctypes`` is what the
#: generator reads; kept here for callers of the old name).
CTYPES = C_TYPES

#: value id -> the axis order it is stored in (a permutation of the value's axes).
Layouts = Mapping[int, tuple[Axis, ...]]


@attrs.frozen
class Dim:
    """A size known only at run time: ``arg`` (a kernel's size argument, C name ``name``, for
    the size class of axis ``uid``) or an operation on sizes (``*`` keeps its factors flat and
    sorted, so equal products compare equal). Integer arithmetic with ints and other dims
    gives dims; ``str`` is the C expression. Deciding anything by its value is refused
    (``bool`` raises): a generator must take the path that is correct for every length."""

    op: str  # arg | * | + | - | / | %
    args: tuple[int | str | Dim, ...]

    @staticmethod
    def arg(name: str, uid: str) -> Dim:
        return Dim("arg", (name, uid))

    def __bool__(self) -> bool:
        raise TypeError(f"the run-time size {self} has no value while generating code")

    def __str__(self) -> str:
        if self.op == "arg":
            return str(self.args[0])
        return "(" + f" {self.op} ".join(str(a) for a in self.args) + ")"

    def __mul__(self, other: Size) -> Size:
        return _mul(self, other)

    __rmul__ = __mul__

    def __add__(self, other: Size) -> Size:
        return self if isinstance(other, int) and other == 0 else Dim("+", (self, other))

    __radd__ = __add__

    def __sub__(self, other: Size) -> Size:
        if other == self:
            return 0
        return self if isinstance(other, int) and other == 0 else Dim("-", (self, other))

    def __rsub__(self, other: Size) -> Size:
        return Dim("-", (other, self))

    def __floordiv__(self, other: Size) -> Size:
        return self if isinstance(other, int) and other == 1 else Dim("/", (self, other))

    def __rfloordiv__(self, other: Size) -> Size:
        return Dim("/", (other, self))

    def __mod__(self, other: Size) -> Size:
        return Dim("%", (self, other))

    def __rmod__(self, other: Size) -> Size:
        return Dim("%", (other, self))

    def args_used(self) -> dict[str, str]:
        """The size arguments this expression reads: C name -> axis uid."""
        if self.op == "arg":
            return {str(self.args[0]): str(self.args[1])}
        out: dict[str, str] = {}
        for a in self.args:
            if isinstance(a, Dim):
                out.update(a.args_used())
        return out


#: a size while generating: a number (bound before compiling) or a run-time ``Dim``.
Size = int | Dim


def _mul(a: Size, b: Size) -> Size:
    const, dims = 1, []
    for x in (a, b):
        parts = x.args if isinstance(x, Dim) and x.op == "*" else (x,)
        for p in parts:
            if isinstance(p, Dim):
                dims.append(p)
            else:
                const *= int(p)
    if not dims:
        return const
    if const == 0:
        return 0
    factors: list[int | Dim] = sorted(dims, key=str)
    if const != 1:
        factors.insert(0, const)
    return factors[0] if len(factors) == 1 else Dim("*", tuple(factors))


def ceil_div(a: Size, b: Size) -> Size:
    """``ceil(a / b)`` for positive sizes (C's truncating division on run-time sizes)."""
    if isinstance(a, int) and isinstance(b, int):
        return -(-a // b)
    if isinstance(b, int) and b == 1:
        return a
    return (a + (b - 1)) // b


def evaluate(x: Size | str, env: Mapping[str, int]) -> int:
    """The value of a size for the run-time sizes ``env`` (size argument C name -> value)."""
    if isinstance(x, int):
        return x
    if isinstance(x, str):
        return env[x]
    if x.op == "arg":
        return env[str(x.args[0])]
    vals = [evaluate(a, env) for a in x.args]
    if x.op == "*":
        return math.prod(vals)
    if x.op == "+":
        return vals[0] + vals[1]
    if x.op == "-":
        return vals[0] - vals[1]
    if x.op == "/":
        return vals[0] // vals[1]
    return vals[0] % vals[1]


def row_major(axes: Sequence[Axis], sizes: Mapping[Axis, Size]) -> tuple[Size, ...]:
    """Element strides of a dense array whose last axis varies fastest."""
    strides: list[Size] = []
    step: Size = 1
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
    strides: tuple[Size, ...]
    ctype: str = "float"  # a default for hand-made buffers only; the generator asks the dialect
    value: int | None = None
    param: str | None = None
    output: bool = False
    dtype: str = "float32"
    #: a parameter ``(*n, *k)`` stored as column panels for the kernel: ``(ceil(N / panel), K,
    #: panel)`` with its first ``panel_axes`` axes flattened as ``N`` (zero-padded to whole
    #: panels) and the rest as ``K``; the target packs it before the kernel runs (0: as stored)
    panel: int = 0
    panel_axes: int = 0

    @property
    def size(self) -> Size:
        """Number of elements (dense; a ``Dim`` when a size is left to run time)."""
        if not self.axes or not self.strides:
            return 1
        return self.strides[0] * int(self.axes[0].size or 1)

    def stride(self, axis: Axis) -> Size:
        return self.strides[self.axes.index(axis)]

    @property
    def repeats(self) -> bool:
        """An axis appears twice (a ``linear("d -> d")`` weight over ``(d, d)``): indexing by
        axis would read the diagonal, so such a buffer is addressed by position only."""
        return len(set(self.axes)) != len(self.axes)

    def address(self, index: Mapping[Axis, Expr | str]) -> Expr:
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

    def address_at(self, exprs: Sequence[Expr | str]) -> Expr:
        """The element offset (an IR expression) for one index expression per storage position
        (IR, or a template's C text)."""
        if len(exprs) != len(self.axes):
            raise ScheduleError(
                f"buffer {self.name} has {len(self.axes)} axes, addressed with "
                f"{len(exprs)} index expressions (a code generation bug)"
            )
        total: Expr | None = None
        for e, s in zip(exprs, self.strides, strict=True):
            x = as_expr(e)
            if x == Const(0, x.type) or (isinstance(x, Raw) and x.text == "0"):
                continue
            if not (isinstance(s, int) and s == 1):
                x = x * (s if isinstance(s, int) else Raw(str(s), x.type))
            total = x if total is None else total + x
        return Const(0, "int32") if total is None else total


def nbytes(buf: Buffer) -> int:
    """Bytes of a dense buffer, at its format's item size."""
    from ncd.dtypes import dtype as to_dtype

    return math.prod(a.size or 1 for a in buf.axes) * to_dtype(buf.dtype).itemsize
