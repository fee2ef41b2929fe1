"""Reductions composed from primitives (issue 15): var/std, argmax/argmin, cumsum, cumprod;
logsumexp is the primitive ``Reduce("logsumexp")`` under the same name.

Each is wiring over existing ops, so every interpretation (reference, torch export, OpenCL,
CUDA, FLOPs, diagram, JSON, gradient) applies unchanged. Non-finite inputs follow torch.
"""

from __future__ import annotations

from ncd._term import Prim, Term, call_site, copy, identity
from ncd.axis import Axis, AxisLike, show
from ncd.dtypes import float32, int64
from ncd.errors import DefinitionError, SizeError
from ncd.op import pinned_format
from ncd.primitives.indexing import Arange, Where
from ncd.primitives.library import Binary, Cast, Constant, Reduce, Scalar, Unary, View

#: larger than any index an argmax can give and exact in float32 (an axis of 2^24 elements
#: or more has indices float32 cannot tell apart anyway)
_NO_INDEX = 3.0e38


def _p(op: object) -> Term:
    return Prim(op, call_site())  # type: ignore[arg-type]


def _axis(what: str, a: object) -> Axis:
    if isinstance(a, Axis):
        return a
    if isinstance(a, str) and a and not a.isspace() and len(a.split()) == 1:
        return Axis(a)
    raise DefinitionError(
        f"{what}: expected one axis name or an Axis, got {show(a)}. Fix: pass a single name "
        "such as 'x' or an ncd.Axis (reduce several axes one after another)."
    )


def _typed(a: Axis) -> Term:
    """Type an unread input as ``[a]`` (lifted by an enclosing ``.over()``) before it is copied:
    a copied hole would otherwise be typed by an op with no template axes."""
    return identity([a])


def logsumexp(axis: AxisLike, *, name: str = "") -> Term:
    """``log(sum(exp(x)))`` over ``axis``, shifted by the row's maximum so it cannot overflow
    (torch's ``logsumexp``): a row of -inf gives -inf, a +inf gives inf, NaN propagates. One
    primitive ``Reduce("logsumexp")``, so a kernel streams it (running max and sum) and a
    FlashAttention backward keeps it as its row statistic."""
    a = _axis("logsumexp", axis)
    return _typed(a) >> _p(Reduce("logsumexp", (a,), name=name))


def var(axis: AxisLike, *, correction: int = 1, name: str = "") -> Term:
    """The variance over ``axis``, ``sum((x - mean)^2) / (|axis| - correction)`` (torch's
    ``var``; ``correction=1``, the unbiased estimate, is its default). Two passes: the mean is
    subtracted before squaring. ``|axis| == correction`` gives NaN, as torch."""
    a = _axis("var", axis)
    if isinstance(correction, bool) or not isinstance(correction, int) or correction < 0:
        raise DefinitionError(
            f"var over {a.describe()}: correction must be an int >= 0, got "
            f"{show(correction)}. Fix: pass 1 (unbiased, torch's default) or 0 (biased)."
        )
    if isinstance(a.size, int) and correction > a.size:
        raise SizeError(
            f"var over {a.describe()}: correction {correction} is larger than the axis "
            f"({a.size} elements). Fix: pass a correction of at most {a.size} (0 or 1)."
        )
    return _typed(a) >> variance((a,), correction, name)


def variance(axes: tuple[Axis, ...], correction: int, name: str = "") -> Term:
    """``sum((x - mean)^2) / (n - correction)`` over ``axes`` together (``n`` the product of
    their sizes, counted at run time, so free sizes work): ``var``'s two passes, over several
    axes at once (a batch norm's statistics over batch and space)."""
    centred = copy(2) >> (identity(1) @ _p(Reduce("mean", axes))) >> _p(Binary("sub"))
    squares = copy(2) >> _p(Binary("mul")) >> _p(Reduce("sum", axes))
    count = _p(Constant(1.0, axes)) >> _p(Reduce("sum", axes))
    if correction:
        count = count >> _p(Scalar("sub", float(correction)))
    return centred >> squares >> (identity(1) @ count) >> _p(Binary("div", name=name))


def std(axis: AxisLike, *, correction: int = 1, name: str = "") -> Term:
    """The standard deviation over ``axis``: ``sqrt(var(axis, correction))`` (torch's ``std``)."""
    return var(axis, correction=correction) >> _p(Unary("sqrt", name=name))


def _arg(fn: str, axis: AxisLike, name: str) -> Term:
    a = _axis(f"arg{fn}", axis)
    # where any NaN, the first NaN (torch counts NaN as the extreme); else the first x == m
    isnan = copy(2) >> _p(Binary("ne"))
    anynan = isnan >> _p(Reduce("max", (a,)))
    ismax = copy(2) >> (identity(1) @ _p(Reduce(fn, (a,)))) >> _p(Binary("eq"))
    hit = copy(3) >> (anynan @ isnan @ ismax) >> _p(Where())
    with pinned_format(float32):  # positions stay exact whatever the model's format
        index = _p(Arange(a, 0.0, 1.0)) @ _p(Constant(_NO_INDEX))
        first = (identity(1) @ index) >> _p(Where()) >> _p(Reduce("min", (a,)))
        found = _p(Cast(int64, name=name))
    return _typed(a) >> hit >> first >> found


def argmax(axis: AxisLike, *, name: str = "") -> Term:
    """The index of the first maximum along ``axis``, an ``int64`` wire as torch's ``argmax``
    gives; a NaN counts as the maximum, as torch's. The values are compared in their own
    format and the positions searched in float32 whatever the model's (``pinned_format``), so
    indices are exact up to 2^24 in a bfloat16 or float16 model too."""
    return _arg("max", axis, name)


def argmin(axis: AxisLike, *, name: str = "") -> Term:
    """The index of the first minimum along ``axis`` (``int64``); a NaN counts as the minimum,
    as torch's ``argmin``."""
    return _arg("min", axis, name)


def _truth(what: str, fn: str, axis: AxisLike, name: str) -> Term:
    a = _axis(what, axis)
    nonzero = _p(Scalar("ne", 0.0))
    return _typed(a) >> nonzero >> _p(Reduce(fn, (a,))) >> _p(Scalar("ne", 0.0, name=name))


def any_true(axis: AxisLike, *, name: str = "") -> Term:
    """Whether any element along ``axis`` is nonzero (NaN is), a ``bool`` wire: torch's
    ``any``."""
    return _truth("any_true", "max", axis, name)


def all_true(axis: AxisLike, *, name: str = "") -> Term:
    """Whether every element along ``axis`` is nonzero (NaN is), a ``bool`` wire: torch's
    ``all``."""
    return _truth("all_true", "min", axis, name)


def max_with_indices(axis: AxisLike, *, name: str = "") -> Term:
    """Two outputs: the maximum along ``axis`` and its first index, ``int64`` (torch's
    ``max(x, dim)``)."""
    a = _axis("max_with_indices", axis)
    return _typed(a) >> copy(2) >> (_p(Reduce("max", (a,), name=name)) @ argmax(a))


def min_with_indices(axis: AxisLike, *, name: str = "") -> Term:
    """Two outputs: the minimum along ``axis`` and its first index, ``int64`` (torch's
    ``min(x, dim)``)."""
    a = _axis("min_with_indices", axis)
    return _typed(a) >> copy(2) >> (_p(Reduce("min", (a,), name=name)) @ argmin(a))


def cumsum(axis: AxisLike, out: AxisLike | None = None, *, name: str = "") -> Term:
    """Running sums along ``axis``: ``y[i] = sum_{j<=i} x[j]`` (torch's ``cumsum``), on
    ``axis`` itself or, given ``out``, on that new axis of the same size. Each output sums only
    the elements at or before it, so an inf or NaN reaches only the positions from its own on.
    A known length takes ``ceil(log2 |axis|)`` doubling steps (``y += y`` shifted by 1, 2, 4...,
    zeros shifted in: O(n log n) work, O(n) memory); a length left to run time sums the
    elements chosen with a select (quadratic)."""
    return _running("sum", 0.0, axis, out, name)


def cumprod(axis: AxisLike, out: AxisLike | None = None, *, name: str = "") -> Term:
    """Running products along ``axis``: ``y[i] = prod_{j<=i} x[j]`` (torch's ``cumprod``), the
    elements after ``i`` selected away as 1, multiplied in order (quadratic work)."""
    return _running("prod", 1.0, axis, out, name)


def _doubling(a: Axis, name: str) -> Term:
    """Hillis and Steele's scan: ``y = y + shift(y, s)`` for ``s = 1, 2, 4, ... < |a|``, zeros
    shifted in (each shift a pad then a slice back onto ``a``). Products keep the select:
    regrouped, a partial product that underflows to 0 meets an inf as NaN where the running
    product in order stays inf."""
    from ncd import ops

    n = int(a.size or 1)
    y = _typed(a)
    s = 1
    while s < n:
        padded = Axis(f"{a.name}_shift{s}", size=n + s)
        shift = ops.pad(a, padded, before=s) >> ops.slice(padded, a, start=0)
        op = Binary("add", name=name if s * 2 >= n else "")
        y = y >> copy(2) >> (identity(1) @ shift) >> _p(op)
        s *= 2
    return y


def _running(fn: str, fill: float, axis: AxisLike, out: AxisLike | None, name: str) -> Term:
    what = f"cum{fn}"
    a = _axis(what, axis)
    o = None if out is None else _axis(what, out)
    if o == a:
        raise DefinitionError(
            f"{what}: out must be a new axis, got {a.describe()} for both. Fix: leave out "
            f"unset to keep the axis, or name a new one, e.g. ops.{what}('x', 'x_cum')."
        )
    if fn == "sum" and isinstance(a.size, int):
        y = _doubling(a, name)
        return y if o is None else y >> _p(View((a,), (o,), ((a,),), ((a,),), ()))
    j = Axis(f"{a.name}_upto", size=a.size)
    to_j = _p(View((a,), (j,), ((a,),), ((a,),), ()))
    with pinned_format(float32):  # exact positions in a bfloat16 model too
        upto = (_p(Arange(a, 0.0, 1.0)) @ _p(Arange(j, 0.0, 1.0))) >> _p(Binary("ge"))
    picked = (upto @ identity(1) @ _p(Constant(fill))) >> _p(Where())
    y = to_j >> picked >> _p(Reduce(fn, (j,), name=name))
    if o is None:
        return y
    return y >> _p(View((a,), (o,), ((a,),), ((a,),), ()))
