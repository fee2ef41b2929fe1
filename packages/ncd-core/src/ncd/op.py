"""The primitive-op base class, parameters, and the registry of op kinds.

An op is a frozen value whose axis-valued fields form its template signature. Lowering
substitutes concrete axes for template ones (``Op.substitute``), so a node in the graph holds an
op whose fields already name the concrete axes it works on.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any, ClassVar, TypeVar

import attrs

from ncd.axis import Axis

__all__ = [
    "OP_KINDS",
    "Op",
    "Param",
    "Product",
    "Signature",
    "axes_field",
    "axis_field",
    "groups_field",
    "register_op",
    "registrar",
]

Signature = tuple[tuple[tuple[Axis, ...], ...], tuple[tuple[Axis, ...], ...]]

#: op kind name -> op class; JSON loading only ever instantiates classes found here.
OP_KINDS: dict[str, type[Op]] = {}


def register_op(cls: type[Op]) -> type[Op]:
    """Class decorator adding an op class to the kind registry (plugins use it through a hook)."""
    if not cls.kind:
        raise ValueError(f"{cls.__name__} has no kind")
    existing = OP_KINDS.get(cls.kind)
    if existing is not None and existing is not cls:
        raise ValueError(f"op kind {cls.kind!r} is already registered by {existing.__module__}")
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
    out = tuple(value)
    for a in out:
        if not isinstance(a, Axis):
            raise TypeError(f"expected Axis objects, got {a!r}")
    return out


def _tuple_of_groups(value: Iterable[Iterable[Axis]]) -> tuple[tuple[Axis, ...], ...]:
    return tuple(_tuple_of_axes(g) for g in value)


def _one_axis(value: Axis) -> Axis:
    if not isinstance(value, Axis):
        raise TypeError(f"expected an Axis, got {value!r}")
    return value


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
    """A learned array owned by an op: its name within the op, axes, and initialiser."""

    name: str
    axes: tuple[Axis, ...] = attrs.field(converter=_tuple_of_axes)
    init: str = "normal"  # normal | uniform_fan_in | ones | zeros
    fan_in: tuple[Axis, ...] = attrs.field(default=(), converter=_tuple_of_axes)


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

    name: str = attrs.field(default="", kw_only=True)

    # -- the template -------------------------------------------------------------------------
    def signature(self) -> Signature:
        """(core axes of each input, core axes of each output), in template order."""
        raise NotImplementedError

    def params(self) -> tuple[Param, ...]:
        """Learned arrays this op owns (shared across its lifted instances)."""
        return ()

    def constraints(self) -> tuple[Product, ...]:
        """Size constraints between the op's axes (views)."""
        return ()

    def derived_axes(self) -> tuple[Axis, ...]:
        """Axes whose size follows from the others (not listed by ``config()``)."""
        return ()

    def in_dtypes(self) -> tuple[str, ...]:
        """Element types the inputs take when the op fixes a model input's type."""
        return ("float32",) * len(self.signature()[0])

    def out_dtypes(self, in_dtypes: tuple[str, ...]) -> tuple[str, ...]:
        """Element types of the outputs given those of the inputs."""
        floats = [d for d in in_dtypes if d.startswith(("float", "bfloat"))]
        return (floats[0] if floats else "float32",) * len(self.signature()[1])

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
