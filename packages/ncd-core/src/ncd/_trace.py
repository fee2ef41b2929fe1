"""The tracing front end: a Python function over symbolic tensors becomes a graph.

Terms called on tensors lower themselves into the active builder, so the traced form of a
composition produces the same nodes, in the same order, as the algebra. Using a tensor twice
is a copy; not using it is a discard.
"""

from __future__ import annotations

import contextvars
import inspect
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any, overload

from ncd._lower import Builder, Hole, Ref
from ncd.axis import ArrayType, Axis, show
from ncd.errors import TraceError
from ncd.graph import Scope

if TYPE_CHECKING:
    from ncd._term import Term

__all__ = ["Tensor", "apply_term", "call_on", "trace"]

_ACTIVE: contextvars.ContextVar[Builder | None] = contextvars.ContextVar("ncd_trace", default=None)


class Tensor:
    """A symbolic value inside ``ncd.trace``; arithmetic builds elementwise ops."""

    __slots__ = ("_builder", "_ref")

    def __init__(self, builder: Builder, ref: Ref) -> None:
        self._builder = builder
        self._ref = ref

    @property
    def type(self) -> ArrayType | None:
        """The array type, or ``None`` for an input no op has read yet."""
        v = self._builder.value_of(self._ref)
        return None if v is None else self._builder.values[v]

    @property
    def axes(self) -> tuple[Axis, ...]:
        t = self.type
        if t is None:
            raise TraceError("this input has no type yet: pass it to an op first")
        return t.axes

    def __repr__(self) -> str:
        return f"Tensor({self.type if self.type is not None else 'untyped input'})"

    def _binary(self, fn: str, other: Any, reverse: bool = False) -> Tensor:
        from ncd import ops

        if isinstance(other, Tensor):
            a, b = (other, self) if reverse else (self, other)
            out: Tensor = ops.binary(fn)(a, b)
            return out
        if isinstance(other, int | float) and not isinstance(other, bool):
            out = ops.scalar(fn, other, reverse=reverse)(self)
            return out
        raise TraceError(f"cannot {fn} a symbolic tensor and {type(other).__name__} {other!r}")

    def __add__(self, o: Any) -> Tensor:
        return self._binary("add", o)

    def __radd__(self, o: Any) -> Tensor:
        return self._binary("add", o, True)

    def __sub__(self, o: Any) -> Tensor:
        return self._binary("sub", o)

    def __rsub__(self, o: Any) -> Tensor:
        return self._binary("sub", o, True)

    def __mul__(self, o: Any) -> Tensor:
        return self._binary("mul", o)

    def __rmul__(self, o: Any) -> Tensor:
        return self._binary("mul", o, True)

    def __truediv__(self, o: Any) -> Tensor:
        return self._binary("div", o)

    def __rtruediv__(self, o: Any) -> Tensor:
        return self._binary("div", o, True)

    def __pow__(self, o: Any) -> Tensor:
        return self._binary("pow", o)

    def __floordiv__(self, o: Any) -> Tensor:
        return self._binary("floordiv", o)

    def __rfloordiv__(self, o: Any) -> Tensor:
        return self._binary("floordiv", o, True)

    def __mod__(self, o: Any) -> Tensor:
        return self._binary("mod", o)

    def __rmod__(self, o: Any) -> Tensor:
        return self._binary("mod", o, True)

    def __neg__(self) -> Tensor:
        from ncd import ops

        out: Tensor = ops.unary("neg")(self)
        return out

    def __bool__(self) -> bool:
        raise TraceError("a symbolic tensor has no truth value (data-dependent control flow)")


def apply_term(term: Term, args: Sequence[Any]) -> Any:
    """Lower ``term`` into the active trace on the given tensors."""
    builder = _ACTIVE.get()
    if builder is None:
        raise TraceError(
            f"{term!r} was called outside a traced function. Fix: compose with >> and @, or "
            "call terms inside a function decorated with @ncd.trace."
        )
    if len(args) != term.n_in:
        raise TraceError(f"{term!r} takes {term.n_in} input(s), got {len(args)}")
    refs: list[Ref] = []
    for a in args:
        if not isinstance(a, Tensor):
            raise TraceError(f"{term!r} received {show(a)}; pass symbolic tensors")
        if a._builder is not builder:
            raise TraceError("a tensor from another traced function was used here")
        refs.append(a._ref)
    outs = [Tensor(builder, r) for r in term.lower(builder, refs)]
    if len(outs) == 1:
        return outs[0]
    return tuple(outs)


@overload
def trace(fn: Callable[..., Any], /) -> Term: ...
@overload
def trace(
    *,
    inputs: Sequence[ArrayType | Sequence[Axis]] | None = None,
    name: str | None = None,
    label: str | None = None,
) -> Callable[[Callable[..., Any]], Term]: ...


def trace(
    fn: Callable[..., Any] | None = None,
    /,
    *,
    inputs: Sequence[ArrayType | Sequence[Axis]] | None = None,
    name: str | None = None,
    label: str | None = None,
) -> Term | Callable[[Callable[..., Any]], Term]:
    """Turn a function over symbolic tensors into a model (a term), once, now.

    ``inputs`` optionally fixes the input types (otherwise the first op reading an input does);
    ``name``/``label`` make the result a named definition like ``Term.named``.
    """
    if fn is None:

        def decorate(f: Callable[..., Any]) -> Term:
            return _trace(f, inputs, name, label)

        return decorate
    return _trace(fn, inputs, name, label)


def _trace(
    fn: Callable[..., Any],
    inputs: Sequence[ArrayType | Sequence[Axis]] | None,
    name: str | None,
    label: str | None,
) -> Term:
    from ncd._term import GraphTerm, _array_type, call_site

    if inputs is not None and (isinstance(inputs, str) or not isinstance(inputs, Sequence)):
        raise TraceError(
            f"trace(inputs=...) takes a list of array types, got {show(inputs)}. Fix: "
            "pass e.g. inputs=[ncd.ArrayType((s, d))]."
        )
    site = call_site()
    if inputs is not None:
        n_in = len(inputs)
    else:
        params = inspect.signature(fn).parameters.values()
        if any(p.kind is p.VAR_POSITIONAL for p in params):
            raise TraceError(
                f"{fn.__name__} takes *args: give trace(inputs=[...]) to fix the arity"
            )
        n_in = sum(p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD) for p in params)
    scope = Scope(name, label if label is not None else name) if name else None
    b = Builder(scope)
    holes: list[Hole] = [b.new_slot() for _ in range(n_in)]
    for hole, t in zip(holes, inputs or (), strict=False):
        b.materialise(hole, _array_type(t))
    outs = call_on(b, fn, holes, f"{fn.__name__} must return tensors of its own trace")
    graph = b.finish(outs, what=fn.__name__)
    return GraphTerm(graph, site)


def call_on(b: Builder, fn: Callable[..., Any], refs: Sequence[Ref], what: str) -> list[Ref]:
    """``fn`` called on tensors of ``refs`` with ``b`` the active trace (its ops lower into
    ``b``; ``ncd.scan``'s cell functions, ``ncd.rnn.RecurrentBlock``): the refs it returns.
    ``what`` opens the ``TraceError`` for a result that is not tensors of ``b``."""
    token = _ACTIVE.set(b)
    try:
        result = fn(*(Tensor(b, r) for r in refs))
    finally:
        _ACTIVE.reset(token)
    outs = result if isinstance(result, tuple | list) else (result,)
    for o in outs:
        if not isinstance(o, Tensor) or o._builder is not b:
            raise TraceError(f"{what}, got {show(o)}")
    return [o._ref for o in outs]
