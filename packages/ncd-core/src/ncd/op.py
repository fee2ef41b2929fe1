"""The primitive-op base class, parameters, and the registry of op kinds.

An op is a frozen value whose axis-valued fields form its template signature. Lowering
substitutes concrete axes for template ones (``Op.substitute``), so a node in the graph holds an
op whose fields already name the concrete axes it works on.
"""

from __future__ import annotations

import math
import numbers
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from typing import Any, ClassVar, TypeVar

import attrs

from ncd.axis import MAX_SIZE, Axis, check_name, show
from ncd.dtypes import FORMATS, DType, float32
from ncd.dtypes import dtype as to_dtype
from ncd.errors import DefinitionError, DTypeError
from ncd.sizes import WindowSize

__all__ = [
    "OP_KINDS",
    "Op",
    "Param",
    "Product",
    "Signature",
    "axes_field",
    "axis_field",
    "pinned_format",
    "choice_field",
    "count_field",
    "flag_field",
    "groups_field",
    "number_field",
    "register_op",
    "registrar",
]

Signature = tuple[tuple[tuple[Axis, ...], ...], tuple[tuple[Axis, ...], ...]]

#: op kind name -> op class; JSON loading only ever instantiates classes found here.
OP_KINDS: dict[str, type[Op]] = {}


def register_op(cls: type[Op]) -> type[Op]:
    """Class decorator adding an op class to the kind registry (plugins use it through a hook)."""
    if not cls.kind:
        raise DefinitionError(f"{cls.__name__} has no kind. Fix: set the class variable kind.")
    existing = OP_KINDS.get(cls.kind)
    if existing is not None and existing is not cls:
        raise DefinitionError(
            f"op kind {cls.kind!r} is already registered by {existing.__module__}. Fix: give "
            f"{cls.__name__} a kind of its own."
        )
    OP_KINDS[cls.kind] = cls
    return cls


R = TypeVar("R")


def registrar(table: dict[type, R]) -> Callable[..., Callable[[R], R]]:
    """A decorator factory for a per-op rule table: ``rule = registrar(TABLE)``, then
    ``@rule(Softmax, L2Norm)`` on a function stores it under each class. Every interpretation
    (reference, torch, codegen, streaming roles, FLOP counts) keeps its rules this way."""

    def for_op(*classes: type) -> Callable[[R], R]:
        def deco(fn: R) -> R:
            for cls in classes:
                table[cls] = fn
            return fn

        return deco

    return for_op


def _tuple_of_axes(value: Iterable[Axis]) -> tuple[Axis, ...]:
    if isinstance(value, str | Axis) or not isinstance(value, Iterable):
        raise DefinitionError(
            f"expected a sequence of Axis objects, got {show(value)}. Fix: pass "
            "Axis objects (ncd.axes) or use the ops.* constructors, which "
            "take names."
        )
    out = tuple(value)
    for a in out:
        if not isinstance(a, Axis):
            raise DefinitionError(
                f"expected Axis objects, got {show(a)}. Fix: pass Axis objects "
                "(ncd.axes) or use the ops.* constructors, which take names."
            )
    return out


def _tuple_of_groups(value: Iterable[Iterable[Axis]]) -> tuple[tuple[Axis, ...], ...]:
    if isinstance(value, str) or not isinstance(value, Iterable):
        raise DefinitionError(
            f"expected groups of Axis objects, got {show(value)}. Fix: pass a "
            "tuple of tuples of Axis."
        )
    return tuple(_tuple_of_axes(g) for g in value)


def _one_axis(value: Axis) -> Axis:
    if not isinstance(value, Axis):
        raise DefinitionError(
            f"expected an Axis, got {show(value)}. Fix: pass an Axis object "
            "(ncd.Axis) or use the ops.* constructors, which take names."
        )
    return value


def _who(op: Any) -> str:
    kind = getattr(type(op), "kind", "") or type(op).__name__
    name = getattr(op, "name", "")
    return f"{kind} op {name!r}" if isinstance(name, str) and name else f"{kind} op"


def _as_number(value: Any) -> Any:
    """attrs converter: a real number becomes a float; anything else is left for the validator
    to report (so one validator words every error, from constructors and the loader alike)."""
    if isinstance(value, bool) or not isinstance(value, numbers.Real):
        return value
    try:
        return float(value)
    except OverflowError:
        return value


def number_field(
    default: Any = attrs.NOTHING,
    *,
    low: float | None = None,
    high: float | None = None,
    high_open: bool = False,
    fix: str = "",
) -> Any:
    """A field holding a finite float, optionally within ``[low, high]`` (``high`` excluded when
    ``high_open``). NaN, infinities, bools, numbers too large for a float and non-numbers raise
    ``DefinitionError`` naming the op, the field and the allowed range."""
    if low is not None and high is not None:
        wanted = f"a finite number in [{low:g}, {high:g}{')' if high_open else ']'}"
    elif low is not None:
        wanted = f"a finite number >= {low:g}"
    elif high is not None:
        wanted = f"a finite number {'<' if high_open else '<='} {high:g}"
    else:
        wanted = "a finite number"

    def check(instance: Any, attribute: Any, value: Any) -> None:
        ok = (
            isinstance(value, float)
            and math.isfinite(value)
            and (low is None or value >= low)
            and (high is None or (value < high if high_open else value <= high))
        )
        if not ok:
            raise DefinitionError(
                f"{_who(instance)}: {attribute.name} must be {wanted}, got {show(value)}. "
                f"Fix: {fix or f'pass {wanted}'}."
            )

    return attrs.field(default=default, converter=_as_number, validator=check)


def choice_field(choices: tuple[str, ...], default: Any = attrs.NOTHING) -> Any:
    """A field holding one of ``choices`` (a function name, an initialiser...)."""

    def check(instance: Any, attribute: Any, value: Any) -> None:
        if not isinstance(value, str) or value not in choices:
            raise DefinitionError(
                f"{_who(instance)}: unknown {attribute.name} {show(value)}. Fix: use one of "
                f"{', '.join(choices)}."
            )

    return attrs.field(default=default, validator=check)


def count_field(default: Any = attrs.NOTHING, *, low: int = 1) -> Any:
    """A field holding an int from ``low`` to ``MAX_SIZE`` (a top-k, a stride, an offset: none
    can exceed the largest axis size, and past it index arithmetic overflows 64 bits)."""

    wanted = ("a positive int" if low == 1 else f"an int >= {low}") + " (at most 2^62)"

    def check(instance: Any, attribute: Any, value: Any) -> None:
        if isinstance(value, bool) or not isinstance(value, int) or not low <= value <= MAX_SIZE:
            raise DefinitionError(
                f"{_who(instance)}: {attribute.name} must be {wanted}, got {show(value)}. "
                f"Fix: pass {wanted}."
            )

    return attrs.field(default=default, validator=check)


def flag_field(default: bool) -> Any:
    """A field holding a bool (``bias``, ``affine``, ``reverse``)."""

    def check(instance: Any, attribute: Any, value: Any) -> None:
        if not isinstance(value, bool):
            raise DefinitionError(
                f"{_who(instance)}: {attribute.name} must be True or False, got "
                f"{show(value)}. Fix: pass a bool."
            )

    return attrs.field(default=default, validator=check)


def _check_op_name(instance: Any, attribute: Any, value: Any) -> None:
    kind = getattr(type(instance), "kind", "") or type(instance).__name__
    check_name(f"the name of a {kind} op", value, empty=True)


def axis_field() -> Any:
    """A field holding one axis."""
    return attrs.field(converter=_one_axis, metadata={"axes": 1})


def axes_field(default: Any = attrs.NOTHING) -> Any:
    """A field holding a tuple of axes."""
    return attrs.field(default=default, converter=_tuple_of_axes, metadata={"axes": 2})


def groups_field() -> Any:
    """A field holding a tuple of tuples of axes."""
    return attrs.field(converter=_tuple_of_groups, metadata={"axes": 3})


@attrs.frozen
class Param:
    """A learned array owned by an op: its name within the op, axes, initialiser and format
    (float32 unless the op has a format of its own: ``Op.params`` fills it in). ``buffer``: a
    state array that is read but not learned (a batch norm's running statistics, torch's
    buffers): it is initialised, saved and loaded like a parameter, but ``ncd.grad`` gives it
    no gradient, so no optimiser moves it."""

    name: str
    axes: tuple[Axis, ...] = attrs.field(converter=_tuple_of_axes)
    init: str = "normal"  # normal | uniform_fan_in | ones | zeros
    fan_in: tuple[Axis, ...] = attrs.field(default=(), converter=_tuple_of_axes)
    dtype: DType = attrs.field(default=float32, converter=to_dtype, kw_only=True)
    buffer: bool = attrs.field(default=False, kw_only=True)


def _op_format(value: Any) -> DType | None:
    """attrs converter of ``Op.dtype``: ``None`` or a float format (an integer or bool format is
    no format for an op's parameters and float values)."""
    if value is None:
        return None
    fmt = to_dtype(value)
    if fmt.kind != "float":
        raise DTypeError(
            f"an op's format must be a float format, got {fmt!r}. Fix: cast to one of "
            f"{', '.join(n for n, t in FORMATS.items() if t.kind == 'float')} (integer wires such "
            "as token ids keep their type by themselves)."
        )
    return fmt


def _typed_params(fn: Callable[[Any], tuple[Param, ...]]) -> Callable[[Any], tuple[Param, ...]]:
    """Wrap an op class's ``params`` so its float parameters carry the op's format."""

    def params(self: Any) -> tuple[Param, ...]:
        ps = fn(self)
        fmt = self.dtype
        if fmt is None:
            return ps
        return tuple(
            attrs.evolve(p, dtype=fmt) if p.dtype.kind == "float" and p.dtype != fmt else p
            for p in ps
        )

    params.__doc__ = fn.__doc__
    params._ncd_typed = True  # type: ignore[attr-defined]
    return params


#: the format ``pinned_format`` gives the ops built inside it (``None``: no pin)
_PINNED: ContextVar[DType | None] = ContextVar("ncd_pinned_format", default=None)


@contextmanager
def pinned_format(fmt: object) -> Iterator[None]:
    """Ops built inside the block have the float format ``fmt`` and keep it through
    ``Term.cast``: the arithmetic of positions (an argmax's index search, a one-hot's index
    ramp), which must stay exact in float32 when the model is cast to bfloat16 (exact to 256)
    or float16 (2048). Values of the model's format meet the pinned ops only as ``bool``
    wires (a comparison's result) or through ``ops.cast``."""
    token = _PINNED.set(_op_format(fmt))
    try:
        yield
    finally:
        _PINNED.reset(token)


def _pinned_default() -> DType | None:
    return _PINNED.get()


def _is_pinned() -> bool:
    return _PINNED.get() is not None


@attrs.frozen
class Product:
    """A size constraint ``size(result) == prod(size(f) for f in factors)``."""

    result: Axis
    factors: tuple[Axis, ...] = attrs.field(converter=_tuple_of_axes)


@attrs.frozen
class Op:
    """Base of every primitive op.

    Subclasses set ``kind`` (the registry and JSON key) and ``category`` (how fusion and cost
    models classify it: ``elementwise``, ``contraction``, ``reduction``, ``normaliser``, ``view``,
    ``source`` or ``other``), and implement ``signature``.
    """

    kind: ClassVar[str] = ""
    category: ClassVar[str] = "other"
    #: computes on integers as torch does (``Binary``, ``Scalar``, ``Unary``, ``Where``): see
    #: ``promotions``
    promotes_integers: ClassVar[bool] = False

    name: str = attrs.field(default="", kw_only=True, validator=_check_op_name)
    #: The op's float format (its parameters, float outputs and float inputs); ``None``: float32
    #: parameters, float outputs in the format of the float inputs. ``Term.cast`` sets it.
    dtype: DType | None = attrs.field(factory=_pinned_default, kw_only=True, converter=_op_format)
    #: ``True``: the format was pinned where the op was built (``pinned_format``) and
    #: ``Term.cast`` leaves it.
    pinned: bool = attrs.field(
        factory=_is_pinned, kw_only=True, validator=attrs.validators.instance_of(bool)
    )

    def __init_subclass__(cls, **kwargs: Any) -> None:
        # Every subclass's ``params`` returns parameters in the op's format, so whoever reads
        # them (init, the interpreters, cost models) sees one answer.
        super().__init_subclass__(**kwargs)
        fn = cls.__dict__.get("params")
        if fn is not None and not getattr(fn, "_ncd_typed", False):
            cls.params = _typed_params(fn)  # type: ignore[method-assign, assignment]

    # -- the template -------------------------------------------------------------------------
    def signature(self) -> Signature:
        """(core axes of each input, core axes of each output), in template order."""
        raise NotImplementedError

    def params(self) -> tuple[Param, ...]:
        """Learned arrays this op owns (shared across its lifted instances)."""
        return ()

    def constraints(self) -> tuple[Product | WindowSize, ...]:
        """Size constraints between the op's axes (views' products, sliding windows)."""
        return ()

    def fixed_axes(self) -> tuple[Axis, ...]:
        """Axes whose size the op's own fields fix (a rotary's frequency table fixes its
        feature axis), which a model cannot leave to run time."""
        return ()

    def derived_axes(self) -> tuple[Axis, ...]:
        """Axes whose size follows from the others (not listed by ``config()``)."""
        return ()

    @property
    def format(self) -> DType:
        """The float format of the op's parameters: ``dtype``, else float32."""
        return float32 if self.dtype is None else self.dtype

    def in_dtypes(self) -> tuple[str, ...]:
        """Element types the inputs take when the op fixes a model input's type."""
        return (self.format,) * len(self.signature()[0])

    def accepts(self, k: int, dtype: str) -> bool:
        """Whether input ``k`` may carry ``dtype``: by default one of the kind (float, int,
        bool) of ``in_dtypes()[k]``, and a bool where a float goes (it counts as 0.0 / 1.0, as
        torch promotes a mask in arithmetic); lowering and loading refuse any other with
        ``DTypeError``."""
        got, want = to_dtype(dtype).kind, to_dtype(self.in_dtypes()[k]).kind
        return got == want or (got == "bool" and want == "float")

    def refusal(self, k: int, dtype: str) -> tuple[str, str]:
        """(why input ``k`` refuses ``dtype``, the fix): the words of lowering's ``DTypeError``
        when ``accepts`` says no."""
        want = self.in_dtypes()[k]
        return (
            f"takes {want} data",
            f"feed it a {want} value, or convert this one with ops.cast(ncd.{want}) (integers "
            "take part as they are in add, sub, mul, max, min, neg, abs and where, and as ids "
            "in ops.embedding and ops.gather)",
        )

    def promotions(self, in_dtypes: tuple[str, ...]) -> tuple[DType | str | None, ...]:
        """Per input, what the interpreters convert it to before the op computes: ``None`` (as
        it is), an integer ``DType`` or ``"float"`` (the op's float arithmetic, whose width
        each interpreter chooses as it does for floats). A bool where the op takes a float is
        0.0 / 1.0, and 0 / 1 of the integer where the op gives one (integer arithmetic); with
        ``promotes_integers``, an integer where the op gives a float (an integer plus a float,
        a quotient of integers) is that float, as torch promotes."""
        outs = [to_dtype(d) for d in self.out_dtypes(in_dtypes)]
        gives = outs[0] if len(outs) == 1 else None
        out: list[DType | str | None] = []
        for d, slot in zip(in_dtypes, self.in_dtypes(), strict=True):
            got, want = to_dtype(d), to_dtype(slot)
            if want.kind == "bool" or got.kind == "float":
                out.append(None)
            elif gives is not None and gives.kind == "int" and self.promotes_integers:
                out.append(None if got == gives else gives)
            elif got.kind == "bool" and want.kind == "float":
                out.append("float")
            elif got.kind == "int" and self.promotes_integers and gives is not None:
                out.append("float" if gives.kind == "float" else None)
            else:
                out.append(None)
        return tuple(out)

    def float_format(self, in_dtypes: tuple[str, ...]) -> DType | None:
        """The one format every float input must have (formats meet only at ``ops.cast``):
        ``dtype`` when set; float32 for an op with parameters (they are float32); else the
        format of the first float input. ``None`` lets inputs differ (a conversion)."""
        if self.dtype is not None:
            return self.dtype
        if self.params():
            return float32
        floats = [to_dtype(d) for d in in_dtypes if to_dtype(d).kind == "float"]
        return floats[0] if floats else None

    def out_dtypes(self, in_dtypes: tuple[str, ...]) -> tuple[str, ...]:
        """Element types of the outputs given those of the inputs."""
        if self.dtype is not None:
            return (self.dtype,) * len(self.signature()[1])
        floats = [d for d in in_dtypes if to_dtype(d).kind == "float"]
        return (floats[0] if floats else float32,) * len(self.signature()[1])

    # -- display --------------------------------------------------------------------------------
    @property
    def label(self) -> str:
        """The op's display name: its instance name, else its kind."""
        return self.name or self.kind

    def core_text(self) -> str:
        """The core signature written with axis names, e.g. ``q d, x d -> q x``."""
        ins, outs = self.signature()
        return f"{_side(ins)} -> {_side(outs)}"

    # -- structure ------------------------------------------------------------------------------
    def axes(self) -> tuple[Axis, ...]:
        """Every axis the op's fields mention, in field order, without repeats."""
        seen: dict[Axis, None] = {}
        for f in attrs.fields(type(self)):
            depth = f.metadata.get("axes")
            value = getattr(self, f.name)
            if depth == 1:
                seen.setdefault(value)
            elif depth == 2:
                for a in value:
                    seen.setdefault(a)
            elif depth == 3:
                for g in value:
                    for a in g:
                        seen.setdefault(a)
        return tuple(seen)

    def substitute(self, fn: Callable[[Axis], Axis]) -> Op:
        """The same op with every axis field mapped through ``fn``."""
        changes: dict[str, Any] = {}
        for f in attrs.fields(type(self)):
            depth = f.metadata.get("axes")
            if not depth:
                continue
            value = getattr(self, f.name)
            if depth == 1:
                new: Any = fn(value)
            elif depth == 2:
                new = tuple(fn(a) for a in value)
            else:
                new = tuple(tuple(fn(a) for a in g) for g in value)
            if new != value or _sizes_differ(new, value):
                changes[f.name] = new
        return attrs.evolve(self, **changes) if changes else self


def _side(groups: tuple[tuple[Axis, ...], ...]) -> str:
    return ", ".join(" ".join(a.name for a in g) for g in groups)


def _sizes_differ(new: Any, old: Any) -> bool:
    if isinstance(new, Axis):
        return bool(new.size != old.size or new.name != old.name)
    return any(_sizes_differ(n, o) for n, o in zip(new, old, strict=True))
