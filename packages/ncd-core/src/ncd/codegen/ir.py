"""The typed loop IR between a kernel's schedule and its text.

Op rules (``ncd.codegen.rules``) and the pointwise driver (``KernelGen``) build *expressions*
(frozen trees: variables, typed constants, index arithmetic, intrinsic calls keyed by name and
dtype, loads with their storage format, vector lanes) and *statements* (declarations,
assignments, stores with their format, loops, guards); ``ncd.codegen.render`` turns both into
text through a ``Dialect``, which alone knows how a target spells a type, a literal, a load
or an intrinsic. Equal trees are equal values, and every expression knows the variables it
reads (``names``), which is how a value is hoisted to the outermost loop that fixes it.

Types are strings: an ncd dtype (``float32``, ``bfloat16``, ``int32``, ``int64``, ``uint32``),
a vector of one (``float32x8``) or a pointer to either (``float32*``). Templates not yet
written in this IR (the tiled matmuls, ncd-cuda's tensor-core and flash kernels) still emit
lines of text and interpolate expressions into them: an expression's ``str`` renders it with
the dialect of the kernel being generated (``rendering``); outside generation it is an error.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from typing import Any

import attrs

__all__ = [
    "Assign",
    "Bin",
    "Broadcast",
    "Call",
    "Const",
    "Convert",
    "Array",
    "Decl",
    "Elem",
    "Expr",
    "For",
    "If",
    "Lane",
    "Load",
    "Raw",
    "Round",
    "Select",
    "Stmt",
    "Store",
    "Un",
    "Var",
    "as_expr",
    "lanes_of",
    "rendering",
    "vector_of",
]

_ACTIVE: ContextVar[Any] = ContextVar("ncd_codegen_dialect", default=None)
_IDENT = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")


@contextmanager
def rendering(dialect: Any) -> Iterator[None]:
    """While generating one kernel: ``str(expr)`` renders through ``dialect``."""
    token = _ACTIVE.set(dialect)
    try:
        yield
    finally:
        _ACTIVE.reset(token)


def vector_of(dtype: str, width: int) -> str:
    """The type of ``width`` lanes of ``dtype`` (``float32x8``)."""
    return f"{dtype}x{width}"


def lanes_of(t: str) -> tuple[str, int]:
    """``(element dtype, lanes)`` of a type; a scalar has one lane."""
    base, _, n = t.partition("x")
    return (base, int(n)) if n.isdigit() else (t, 1)


def _coerce(x: Any, like: Expr) -> Expr:
    if isinstance(x, Expr):
        return x
    if isinstance(x, bool) or not isinstance(x, int):
        # a float operand has no format of its own: a rule writes gen.lit(x)
        raise TypeError(f"IR arithmetic takes expressions and integers, not {x!r}")
    return Const(x, like.type if like.type.startswith(("int", "uint")) else "int32")


class Expr:
    """An expression: ``+ - * / %`` with expressions or integers build ``Bin`` nodes."""

    type: str

    @property
    def names(self) -> frozenset[str]:
        """The identifiers this expression reads (variables, buffers, size arguments)."""
        raise NotImplementedError

    def __add__(self, o: Any) -> Expr:
        return Bin("+", self, _coerce(o, self))

    def __radd__(self, o: Any) -> Expr:
        return Bin("+", _coerce(o, self), self)

    def __sub__(self, o: Any) -> Expr:
        return Bin("-", self, _coerce(o, self))

    def __rsub__(self, o: Any) -> Expr:
        return Bin("-", _coerce(o, self), self)

    def __mul__(self, o: Any) -> Expr:
        return Bin("*", self, _coerce(o, self))

    def __rmul__(self, o: Any) -> Expr:
        return Bin("*", _coerce(o, self), self)

    def __truediv__(self, o: Any) -> Expr:
        return Bin("/", self, _coerce(o, self))

    def __rtruediv__(self, o: Any) -> Expr:
        return Bin("/", _coerce(o, self), self)

    def __mod__(self, o: Any) -> Expr:
        return Bin("%", self, _coerce(o, self))

    def __neg__(self) -> Expr:
        return Un("-", self)

    def cmp(self, op: str, o: Any) -> Expr:
        """A comparison (``<``, ``<=``, ``>``, ``>=``, ``==``, ``!=``): an ``int32`` truth."""
        return Bin(op, self, _coerce(o, self), "int32")

    def __str__(self) -> str:
        from ncd.codegen.render import render_expr

        dialect = _ACTIVE.get()
        if dialect is None:
            raise TypeError(
                "an IR expression was turned into text outside kernel generation; render it "
                "with ncd.codegen.render.render_expr(expr, dialect)"
            )
        return render_expr(self, dialect)

    def __format__(self, spec: str) -> str:
        return format(str(self), spec)


def _names(*parts: Expr) -> frozenset[str]:
    out: frozenset[str] = frozenset()
    for p in parts:
        out |= p.names
    return out


@attrs.frozen(eq=True, repr=False, str=False)
class Var(Expr):
    """A named scalar or vector: a loop index, an accumulator, a value computed once."""

    name: str
    type: str

    @property
    def names(self) -> frozenset[str]:
        return frozenset({self.name})

    def __repr__(self) -> str:
        return f"Var({self.name}:{self.type})"


@attrs.frozen(eq=True, repr=False, str=False)
class Const(Expr):
    """A literal of ``type``: a float (or its decimal text, kept digit for digit) or an int."""

    value: float | int | str
    type: str

    @property
    def names(self) -> frozenset[str]:
        return frozenset()

    def __repr__(self) -> str:
        return f"Const({self.value!r}:{self.type})"


@attrs.frozen(eq=True, repr=False, str=False)
class Raw(Expr):
    """Text the IR does not model (a template's expression, a run-time size ``n_seq``), with
    the identifiers it reads."""

    text: str
    type: str = "int32"

    @property
    def names(self) -> frozenset[str]:
        return frozenset(_IDENT.findall(self.text))

    def __repr__(self) -> str:
        return f"Raw({self.text!r})"


@attrs.frozen(eq=True, repr=False, str=False)
class Bin(Expr):
    """``(a op b)``; comparisons and logic give ``int32`` (``type``), arithmetic ``a``'s type."""

    op: str
    a: Expr
    b: Expr
    result: str = ""

    @property
    def type(self) -> str:  # type: ignore[override]
        if self.result:
            return self.result
        # a scalar and a vector operand: the vector's type
        return self.b.type if lanes_of(self.b.type)[1] > lanes_of(self.a.type)[1] else self.a.type

    @property
    def names(self) -> frozenset[str]:
        return _names(self.a, self.b)

    def __repr__(self) -> str:
        return f"({self.a!r} {self.op} {self.b!r})"


@attrs.frozen(eq=True, repr=False, str=False)
class Un(Expr):
    op: str
    a: Expr

    @property
    def type(self) -> str:  # type: ignore[override]
        return self.a.type

    @property
    def names(self) -> frozenset[str]:
        return self.a.names

    def __repr__(self) -> str:
        return f"({self.op}{self.a!r})"


@attrs.frozen(eq=True, repr=False, str=False)
class Call(Expr):
    """An intrinsic by portable name (``exp``, ``rsqrt``, ``fmax``) at ``type``: the dialect
    picks the spelling for the pair."""

    fn: str
    args: tuple[Expr, ...]
    type: str

    @property
    def names(self) -> frozenset[str]:
        return _names(*self.args)

    def __repr__(self) -> str:
        return f"{self.fn}:{self.type}{self.args!r}"


@attrs.frozen(eq=True, repr=False, str=False)
class Select(Expr):
    """``cond ? a : b``."""

    cond: Expr
    a: Expr
    b: Expr

    @property
    def type(self) -> str:  # type: ignore[override]
        return self.a.type

    @property
    def names(self) -> frozenset[str]:
        return _names(self.cond, self.a, self.b)


@attrs.frozen(eq=True, repr=False, str=False)
class Convert(Expr):
    """``x`` converted to ``type`` (a C cast)."""

    x: Expr
    type: str

    @property
    def names(self) -> frozenset[str]:
        return self.x.names


@attrs.frozen(eq=True, repr=False, str=False)
class Broadcast(Expr):
    """The scalar ``x`` in every lane of a vector of ``type``."""

    x: Expr
    type: str

    @property
    def names(self) -> frozenset[str]:
        return self.x.names


@attrs.frozen(eq=True, repr=False, str=False)
class Lane(Expr):
    """Lane ``k`` of the vector ``x``."""

    x: Expr
    k: int

    @property
    def type(self) -> str:  # type: ignore[override]
        return lanes_of(self.x.type)[0]

    @property
    def names(self) -> frozenset[str]:
        return self.x.names


@attrs.frozen(eq=True, repr=False, str=False)
class Load(Expr):
    """Element ``addr`` of buffer ``buf`` stored as ``dtype``, in the arithmetic type ``type``
    (a vector of ``lanes`` consecutive elements when ``lanes`` > 1; ``space`` and ``const``
    qualify the vector pointer)."""

    buf: str
    addr: Expr
    dtype: str
    type: str
    lanes: int = 1
    const: bool = True

    @property
    def names(self) -> frozenset[str]:
        return frozenset({self.buf}) | self.addr.names


@attrs.frozen(eq=True, repr=False, str=False)
class Round(Expr):
    """``x`` (arithmetic type) rounded to the narrower format ``dtype`` and back."""

    x: Expr
    dtype: str

    @property
    def type(self) -> str:  # type: ignore[override]
        return self.x.type

    @property
    def names(self) -> frozenset[str]:
        return self.x.names


@attrs.frozen(eq=True, repr=False, str=False)
class Elem(Expr):
    """Element ``index`` of the private array ``array`` (an accumulator, a chunk of scores),
    of type ``type``; also an lvalue."""

    array: str
    index: Expr
    type: str

    @property
    def names(self) -> frozenset[str]:
        return frozenset({self.array}) | self.index.names

    def __repr__(self) -> str:
        return f"{self.array}[{self.index!r}]"


def as_expr(x: Expr | str | int, type: str = "int32") -> Expr:
    """An expression from what a template passes: an expression, an int, or C text."""
    if isinstance(x, Expr):
        return x
    if isinstance(x, int):
        return Const(x, type)
    return Raw(str(x), type)


# -- statements -------------------------------------------------------------------------------
class Stmt:
    """A statement of a kernel body."""

    @property
    def names(self) -> frozenset[str]:
        raise NotImplementedError


@attrs.frozen(eq=True)
class Decl(Stmt):
    """``type var = init;`` (``const`` for a value never reassigned)."""

    var: Var
    init: Expr
    const: bool = False

    @property
    def names(self) -> frozenset[str]:
        return self.init.names


@attrs.frozen(eq=True)
class Assign(Stmt):
    """``target op value;`` with ``op`` one of ``=``, ``+=``, ``*=``..."""

    target: Expr
    value: Expr
    op: str = "="

    @property
    def names(self) -> frozenset[str]:
        return _names(self.target, self.value)


@attrs.frozen(eq=True)
class Store(Stmt):
    """``value`` (arithmetic type) written to element ``addr`` of ``buf``, converted to the
    buffer's format ``dtype`` (``lanes`` consecutive elements of a vector value)."""

    buf: str
    addr: Expr
    value: Expr
    dtype: str
    lanes: int = 1

    @property
    def names(self) -> frozenset[str]:
        return frozenset({self.buf}) | _names(self.addr, self.value)


@attrs.frozen(eq=True)
class Array(Stmt):
    """``type name[n];``: a private array of a length known when compiling."""

    name: str
    type: str
    n: int

    @property
    def names(self) -> frozenset[str]:
        return frozenset()


@attrs.frozen(eq=True)
class For(Stmt):
    """The head of a loop: ``var`` from ``start`` while below ``stop`` by ``step``."""

    var: Var
    start: Expr
    stop: Expr
    step: Expr | int = 1

    @property
    def names(self) -> frozenset[str]:
        step = self.step.names if isinstance(self.step, Expr) else frozenset()
        return self.start.names | self.stop.names | step


@attrs.frozen(eq=True)
class If(Stmt):
    """The head of a guarded block."""

    cond: Expr

    @property
    def names(self) -> frozenset[str]:
        return self.cond.names
