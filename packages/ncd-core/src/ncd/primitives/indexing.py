"""Ops that read a value at other indices than the one they write, or choose between values:
``Where`` (a select on a condition), ``Slice`` and ``Concat`` along one axis, ``Rotary``
(rotary position embedding), ``Gather`` (a value read at indices held by another) and
``Arange`` (the index along an axis as a value), with their reference rules and streaming
roles.

A slice's or a concatenation's output is an axis of its own (its size differs from the
input's), as a split of a view is: composition binds it like any other axis.
"""

from __future__ import annotations

from typing import ClassVar

import attrs
import numpy as np

from ncd.axis import Axis
from ncd.dtypes import DType
from ncd.dtypes import dtype as to_dtype
from ncd.errors import DefinitionError, SizeError
from ncd.op import (
    Op,
    Signature,
    axes_field,
    axis_field,
    count_field,
    flag_field,
    number_field,
    register_op,
)
from ncd.primitives.library import integer_result
from ncd.reference import Context, check_indices, index_rule, reference_rule
from ncd.streaming import ROLE_RULES

__all__ = ["Arange", "Concat", "Gather", "Rotary", "Slice", "Where", "rotary_angles"]


@register_op
@attrs.frozen
class Where(Op):
    """``x`` where ``cond`` is true (nonzero), else ``y``, elementwise over the union of the
    three inputs' axes (the seed's ternary ``cond ? x : y``). NaN in ``cond`` counts as true,
    as in NumPy and torch."""

    kind: ClassVar[str] = "where"
    category: ClassVar[str] = "elementwise"
    promotes_integers: ClassVar[bool] = True

    def signature(self) -> Signature:
        return ((), (), ()), ((),)

    def in_dtypes(self) -> tuple[str, ...]:
        return ("bool", self.format, self.format)

    def accepts(self, k: int, dtype: str) -> bool:
        if k == 0:
            return True  # a condition of any type: bool, a 0/1 float mask, integer ids
        # a bool value counts as 0.0 / 1.0 (or 0 / 1 beside an integer)
        return to_dtype(dtype).kind in ("float", "bool", "int")

    def float_format(self, in_dtypes: tuple[str, ...]) -> DType | None:
        if self.dtype is not None:
            return self.dtype
        floats = [to_dtype(d) for d in in_dtypes[1:] if to_dtype(d).kind == "float"]
        return floats[0] if floats else None

    def out_dtypes(self, in_dtypes: tuple[str, ...]) -> tuple[str, ...]:
        whole = integer_result("where", in_dtypes[1:])
        if whole is not None:
            return (whole,)  # integers selected stay integers
        if self.dtype is not None:
            return (self.dtype,)
        return (self.float_format(in_dtypes) or to_dtype("float32"),)


def _size(a: Axis) -> int | None:
    return a.size if isinstance(a.size, int) else None


@register_op
@attrs.frozen
class Slice(Op):
    """``x[start : start + |out|]`` along ``axis``, as the new axis ``out``; ``from_end``:
    ``start`` counts from the end, ``x[n - start - |out| : n - start]`` (``x[:, -1]`` is
    ``start=0`` of a one-wide ``out``), so it reads the same elements at every length ``n``."""

    kind: ClassVar[str] = "slice"
    category: ClassVar[str] = "other"
    axis: Axis = axis_field()
    out: Axis = axis_field()
    start: int = count_field(0, low=0)
    from_end: bool = flag_field(False)

    def __attrs_post_init__(self) -> None:
        if self.axis == self.out:
            raise DefinitionError(
                f"slice: the sliced axis and the result are one axis {self.axis.describe()}. "
                "Fix: give the slice a new axis of the slice's length, e.g. "
                "ops.slice('d', 'half', start=0, half=16)."
            )
        n, m = _size(self.axis), _size(self.out)
        if n is not None and m is not None and self.start + m > n and self.from_end:
            raise DefinitionError(
                f"slice: the last {self.start + m} elements of {self.axis.describe()} reach past "
                f"its start. Fix: give {self.axis.name} at least {self.start + m} elements."
            )
        if n is not None and m is not None and self.start + m > n:
            raise DefinitionError(
                f"slice: [{self.start}:{self.start + m}] of {self.axis.describe()} ends past its "
                f"size {n}. Fix: slice at most {max(n - self.start, 0)} elements from "
                f"{self.start}, or start earlier."
            )

    def signature(self) -> Signature:
        return ((self.axis,),), ((self.out,),)

    def accepts(self, k: int, dtype: str) -> bool:
        return True  # moves elements of any type

    def out_dtypes(self, in_dtypes: tuple[str, ...]) -> tuple[str, ...]:
        return in_dtypes

    def first(self, n: int, m: int) -> int:
        """The first index read along ``axis`` of ``n`` elements into ``out`` of ``m``."""
        return n - self.start - m if self.from_end else self.start

    @property
    def label(self) -> str:
        if self.name:
            return self.name
        if self.from_end:
            return f"slice -{self.start}-{self.out.name}:-{self.start}"
        return f"slice {self.start}:{self.start}+{self.out.name}"


@register_op
@attrs.frozen
class Concat(Op):
    """The inputs joined end to end along the new axis ``out``: input ``k`` is indexed by
    ``axes_[k]`` and fills ``out`` from ``sum(|axes_[i]| for i < k)``."""

    kind: ClassVar[str] = "concat"
    category: ClassVar[str] = "other"
    axes_: tuple[Axis, ...] = axes_field()
    out: Axis = axis_field()

    def __attrs_post_init__(self) -> None:
        if not self.axes_:
            raise DefinitionError("concat needs at least one input axis. Fix: pass 'a b -> c'.")
        if len(set(self.axes_)) != len(self.axes_) or self.out in self.axes_:
            raise DefinitionError(
                f"concat: the axes {[a.describe() for a in (*self.axes_, self.out)]} must all "
                "differ (each input's axis and the result are axes of their own). Fix: rename "
                "an input's axis (ops.rename) before joining."
            )
        sizes = [_size(a) for a in self.axes_]
        m = _size(self.out)
        if m is not None and None not in sizes and sum(s or 0 for s in sizes) != m:
            raise DefinitionError(
                f"concat: {' + '.join(a.describe() for a in self.axes_)} = "
                f"{sum(s or 0 for s in sizes)} elements do not fill {self.out.describe()}. "
                "Fix: size the result axis as the sum of the inputs' sizes."
            )

    def signature(self) -> Signature:
        return tuple((a,) for a in self.axes_), ((self.out,),)

    def accepts(self, k: int, dtype: str) -> bool:
        return True

    def out_dtypes(self, in_dtypes: tuple[str, ...]) -> tuple[str, ...]:
        return in_dtypes[:1]


def _frequencies(value: object) -> tuple[float, ...]:
    try:
        return tuple(float(f) for f in value)  # type: ignore[attr-defined]
    except (TypeError, ValueError):
        raise DefinitionError(
            f"rotary: freqs must be a sequence of numbers, got {value!r}. Fix: pass the |d|/2 "
            "frequencies of the rotation pairs (HF's inv_freq)."
        ) from None


def _check_frequencies(instance: object, attribute: object, value: tuple[float, ...]) -> None:
    if not all(np.isfinite(f) and f >= 0 for f in value):
        raise DefinitionError(
            f"rotary: every frequency must be finite and >= 0, got {list(value)}. Fix: pass "
            "the frequencies of the rotation pairs (HF's inv_freq)."
        )


@register_op
@attrs.frozen
class Rotary(Op):
    """Rotary position embedding (RoFormer, Su et al. 2021, eq. 34) in the rotate-half layout
    of GPT-NeoX and Llama: with ``h = |d| / 2``, position ``t`` (the index along ``seq``) and
    ``f_j = base ** (-2 (j mod h) / |d|)`` (or ``freqs[j mod h]`` when ``freqs`` is given: a
    scaled RoPE's table, Llama 3's or YaRN's ``inv_freq``),
    ``y[t, j] = s (x[t, j] cos(t f_j) - x[t, j + h] sin(t f_j))`` for ``j < h`` and
    ``y[t, j] = s (x[t, j] cos(t f_j) + x[t, j - h] sin(t f_j))`` for ``j >= h``, ``s`` the
    ``scale`` (YaRN's attention factor; 1 otherwise); ``inverse``: the angles negated (the
    rotation's transpose, which is its gradient)."""

    kind: ClassVar[str] = "rotary"
    category: ClassVar[str] = "elementwise"
    seq: Axis = axis_field()
    d: Axis = axis_field()
    base: float = number_field(10000.0, low=1.0, fix="pass a base above 1, such as 10000.0")
    #: rotate by minus the angles (the transpose and the inverse of the rotation: its gradient)
    inverse: bool = flag_field(False)
    #: the frequency of each rotation pair (``|d| / 2`` of them), in place of ``base``'s
    freqs: tuple[float, ...] = attrs.field(
        default=(), converter=_frequencies, validator=_check_frequencies
    )
    scale: float = number_field(1.0, fix="pass a finite scale, such as 1.0")

    def __attrs_post_init__(self) -> None:
        if self.seq == self.d:
            raise DefinitionError(
                f"rotary: positions and features are one axis {self.d.describe()}. Fix: pass "
                "the sequence axis and the head-width axis."
            )
        n = _size(self.d)
        if n is not None and n % 2:
            raise DefinitionError(
                f"rotary: {self.d.describe()} is odd; the rotation pairs feature j with "
                f"j + |d|/2. Fix: give {self.d.name} an even size."
            )
        if self.freqs and n is not None and len(self.freqs) != n // 2:
            raise DefinitionError(
                f"rotary: {len(self.freqs)} frequencies for {self.d.describe()}, which has "
                f"{n // 2} rotation pairs. Fix: pass one frequency per pair (|d|/2 of them)."
            )
        if self.freqs and n is None:
            raise DefinitionError(
                f"rotary: a frequency table needs the size of {self.d.describe()}. Fix: size "
                f"{self.d.name} ({len(self.freqs) * 2} for these {len(self.freqs)} frequencies)."
            )

    def signature(self) -> Signature:
        return ((self.seq, self.d),), ((self.seq, self.d),)

    def fixed_axes(self) -> tuple[Axis, ...]:
        return (self.d,) if self.freqs else ()

    @property
    def label(self) -> str:
        return self.name or ("rope_inverse" if self.inverse else "rope")


@register_op
@attrs.frozen
class Gather(Op):
    """``table`` read along ``axis`` at the integer ``ids``: ``y[..] = table[.., ids[..], ..]``,
    fed ``(ids, table)`` as ``F.embedding`` is. The ids' axes and the table's other axes meet
    by name as any elementwise op's do (the ids' first), so ``ids [batch seq]`` into ``table
    [vocab d_model]`` gives rows ``[batch seq d_model]`` (an embedding of a value: a tied
    table), and ``targets [batch seq]`` into ``logits [batch seq vocab]`` gives ``[batch seq]``
    (``take_along_axis``). Ids outside ``[0, |axis|)`` are refused (``IndexRangeError``) on a
    model input before anything runs and by the reference; a kernel clamps them, so no id
    reads outside the table."""

    kind: ClassVar[str] = "gather"
    category: ClassVar[str] = "other"
    axis: Axis = axis_field()

    def signature(self) -> Signature:
        return ((), (self.axis,)), ((),)

    def in_dtypes(self) -> tuple[str, ...]:
        return ("int64", self.format)

    def accepts(self, k: int, dtype: str) -> bool:
        return to_dtype(dtype).kind == ("int" if k == 0 else "float")

    def refusal(self, k: int, dtype: str) -> tuple[str, str]:
        if k == 0:
            return (
                f"reads its ids as integers, got {dtype}",
                "feed int64 ids (a float index has no exact row)",
            )
        return super().refusal(k, dtype)

    def float_format(self, in_dtypes: tuple[str, ...]) -> DType | None:
        return self.dtype if self.dtype is not None else to_dtype(in_dtypes[1])

    def out_dtypes(self, in_dtypes: tuple[str, ...]) -> tuple[str, ...]:
        return (self.dtype if self.dtype is not None else in_dtypes[1],)


@register_op
@attrs.frozen
class Arange(Op):
    """The index along ``axis`` as a float value: ``start + step * i`` at position ``i`` (an
    index ramp, O(|axis|); positions, one-hot rows, identities and masks are built on it)."""

    kind: ClassVar[str] = "arange"
    category: ClassVar[str] = "source"
    axis: Axis = axis_field()
    start: float = number_field(0.0, fix="pass a finite start")
    step: float = number_field(1.0, fix="pass a finite step")

    def signature(self) -> Signature:
        return (), ((self.axis,),)

    @property
    def label(self) -> str:
        return self.name or "arange"


def rotary_angles(n: int, d: int, base: float, freqs: tuple[float, ...] = ()) -> np.ndarray:
    """``t f_j`` over ``(n, d)``, in float64: the angles of ``Rotary`` (``freqs``: the table of
    a scaled RoPE, one frequency per pair, in place of ``base``'s)."""
    h = d // 2
    pair = np.arange(d) % h
    f = np.asarray(freqs, np.float64)[pair] if freqs else base ** (-2.0 * pair / d)
    return np.arange(n, dtype=np.float64)[:, None] * f[None, :]


def _check_size(ctx: Context, a: Axis, n: int) -> None:
    s = ctx.size(a)
    if s != n:
        raise SizeError(f"{a.describe()} has size {s} but its array has {n} elements")


@reference_rule(Where)
def _where(
    op: Where, xs: list[np.ndarray], p: dict[str, np.ndarray], ctx: Context
) -> list[np.ndarray]:
    cond, x, y = xs
    out = np.where(cond != 0, x, y) if cond.dtype != np.bool_ else np.where(cond, x, y)
    return [out.astype(np.result_type(x, y), copy=False)]


@reference_rule(Slice)
def _slice(
    op: Slice, xs: list[np.ndarray], p: dict[str, np.ndarray], ctx: Context
) -> list[np.ndarray]:
    x = xs[0]
    n, m = x.shape[-1], ctx.size(op.out)
    first = op.first(n, m)
    if first < 0 or first + m > n:
        where = f"the last {op.start + m} elements" if op.from_end else f"[{first}:{first + m}]"
        need = op.start + m if op.from_end else first + m
        raise SizeError(
            f"slice: {where} of {op.axis.describe()} reach past its size {n}. Fix: give "
            f"{op.axis.name} at least {need} elements."
        )
    return [x[..., first : first + m]]


@reference_rule(Concat)
def _concat(
    op: Concat, xs: list[np.ndarray], p: dict[str, np.ndarray], ctx: Context
) -> list[np.ndarray]:
    shape = np.broadcast_shapes(*(x.shape[:-1] for x in xs))
    parts = [np.broadcast_to(x, (*shape, x.shape[-1])) for x in xs]
    out = np.concatenate(parts, axis=-1)
    _check_size(ctx, op.out, out.shape[-1])
    return [out]


@reference_rule(Rotary)
def _rotary(
    op: Rotary, xs: list[np.ndarray], p: dict[str, np.ndarray], ctx: Context
) -> list[np.ndarray]:
    x = xs[0]
    n, d = x.shape[-2:]
    angles = rotary_angles(n, d, op.base, op.freqs)
    h = d // 2
    turned = np.concatenate([-x[..., h:], x[..., :h]], axis=-1)
    sin = -np.sin(angles) if op.inverse else np.sin(angles)
    out = x * (op.scale * np.cos(angles)) + turned * (op.scale * sin)
    return [out.astype(x.dtype, copy=False)]


@reference_rule(Gather)
def _gather(
    op: Gather, xs: list[np.ndarray], p: dict[str, np.ndarray], ctx: Context
) -> list[np.ndarray]:
    ids, table = xs
    check_indices(op, op.axis, table.shape[-1], ids, "the ids")
    lead = np.broadcast_shapes(table.shape[:-1], ids.shape)
    rows = np.broadcast_to(table, (*lead, table.shape[-1]))
    at = np.broadcast_to(ids, lead).astype(np.intp)[..., None]
    return [np.take_along_axis(rows, at, axis=-1)[..., 0]]


@reference_rule(Arange)
def _arange(
    op: Arange, xs: list[np.ndarray], p: dict[str, np.ndarray], ctx: Context
) -> list[np.ndarray]:
    i = np.arange(ctx.size(op.axis), dtype=op.format.accumulate.numpy)
    return [op.start + op.step * i]


@index_rule(Gather)
def _gather_ids(op: Gather) -> tuple[tuple[int, Axis], ...]:
    return ((0, op.axis),)


# Streaming roles: a select keeps indices; a slice, a concatenation and the rotation read
# other indices along their own axis (the rotation keeps positions).
ROLE_RULES[Where] = lambda op, axis: "map"
ROLE_RULES[Arange] = lambda op, axis: "map"
ROLE_RULES[Gather] = lambda op, axis: "whole" if axis == op.axis else "map"
ROLE_RULES[Slice] = lambda op, axis: "whole" if axis in (op.axis, op.out) else "map"
ROLE_RULES[Concat] = lambda op, axis: "whole" if axis in (*op.axes_, op.out) else "map"
ROLE_RULES[Rotary] = lambda op, axis: "whole" if axis == op.d else "map"
