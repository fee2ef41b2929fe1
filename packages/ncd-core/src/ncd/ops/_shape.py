"""Shape ops composed from primitives (issue 15): flip, roll, reflect/replicate/circular
padding, tile, repeat_interleave and stack.

Each is wiring over slices, windows, concats, views and a product with a constant 1, so every
interpretation (reference, torch export, OpenCL, CUDA, FLOPs, diagram, JSON, gradient) applies
unchanged and moves elements exactly: a NaN, an inf or a -0.0 arrives where torch puts it.
"""

from __future__ import annotations

from ncd._term import Term, copy, identity
from ncd.axis import Axis, show
from ncd.errors import DefinitionError, SizeError
from ncd.ops._reductions import _p, _typed
from ncd.primitives.indexing import Concat, Slice
from ncd.primitives.library import Binary, Constant, View
from ncd.primitives.window import Window

#: the modes of ``ops.pad``, as torch's ``F.pad`` names them
PAD_MODES = ("constant", "reflect", "replicate", "circular")


def _sized(what: str, a: Axis) -> int:
    if not isinstance(a.size, int):
        raise SizeError(
            f"{what} needs the size of axis {a.name!r} when it is defined (its elements move by "
            f"amounts that depend on it). Fix: size the axis, e.g. ops.{what}('{a.name}', "
            f"{a.name}=7), or an ncd.Axis('{a.name}', size=7)."
        )
    return a.size


def _count(what: str, field: str, v: object, low: int) -> int:
    if isinstance(v, bool) or not isinstance(v, int) or v < low:
        raise DefinitionError(
            f"{what}: {field} must be an int >= {low}, got {show(v)}. Fix: pass a whole count."
        )
    return v


def _rename(a: Axis, b: Axis) -> Term:
    return _p(View((a,), (b,), ((a,),), ((a,),), ()))


def _lift(axis: Axis) -> Term:
    """``x`` broadcast over the new ``axis`` (times a constant 1 over it: exact, fused)."""
    return (identity(1) @ _p(Constant(1.0, (axis,)))) >> _p(Binary("mul"))


def _reversed(a: Axis, n: int, name: str = "") -> Term:
    """``y[i] = x[n - 1 - i]`` on ``a`` itself: one window of all ``n`` offsets read backwards,
    its single position summed away."""
    j = Axis(f"{a.name}_flipped", size=n)
    tap = Axis(f"{a.name}_flip_at", size=1)
    window = _p(Window(a, tap, j, 1, 0, 1, 0.0, 1, 0, True, name=name))
    return window >> _merged((tap, j), a)


def flip(a: Axis, name: str) -> Term:
    n = _sized("flip", a)
    return identity([a]) if n == 1 else _reversed(a, n, name)


def roll(a: Axis, shift: int, name: str) -> Term:
    n = _sized("roll", a)
    if isinstance(shift, bool) or not isinstance(shift, int):
        raise DefinitionError(f"roll: shift must be an int, got {show(shift)}. Fix: pass one.")
    s = shift % n
    if s == 0:
        return identity([a])
    tail, head = Axis(f"{a.name}_tail", size=s), Axis(f"{a.name}_head", size=n - s)
    c = Axis(f"{a.name}_rolled", size=n)
    parts = _p(Slice(a, tail, 0, True)) @ _p(Slice(a, head, 0, False))
    return _typed(a) >> copy(2) >> parts >> _p(Concat((tail, head), c, name=name)) >> _rename(c, a)


def edge_pad(a: Axis, o: Axis, before: int, after: int, mode: str, name: str) -> Term:
    """The pieces of a non-constant ``ops.pad``: slices joined by one concat."""
    what = f"pad (mode {mode!r})"
    n = _sized(what, a)
    limit = {"reflect": n - 1, "circular": n}.get(mode)
    if limit is not None and max(before, after) > limit:
        raise SizeError(
            f"{what}: before {before} and after {after} must be at most {limit} for "
            f"{a.describe()} (torch refuses the same). Fix: pad less, or pad in two steps."
        )
    pieces: list[tuple[Axis, Term]] = []
    for side, k in (("before", before), ("after", after)):
        if k == 0:
            continue
        p = Axis(f"{a.name}_{side}", size=k)
        at_end = side == "after"
        if mode == "replicate":
            edge, each = Axis(f"{a.name}_{side}_edge", size=1), Axis(f"{a.name}_{side}_k", size=k)
            piece = _p(Slice(a, edge, 0, at_end)) >> _lift(each) >> _merged((edge, each), p)
        elif mode == "reflect":  # x[k..1] before, x[n-2..n-1-k] after
            piece = _p(Slice(a, p, 1, at_end)) >> _reversed(p, k)
        else:  # circular: the last k elements before, the first k after
            piece = _p(Slice(a, p, 0, not at_end))
        pieces.append((p, piece))
    if not pieces:
        return _rename(a, o)
    axes = [a]
    body: Term = identity(1)
    if before:
        axes.insert(0, pieces[0][0])
        body = pieces[0][1] @ body
    if after:
        axes.append(pieces[-1][0])
        body = body @ pieces[-1][1]
    join = _p(Concat(tuple(axes), _sized_as(o, n + before + after, "pad"), name=name))
    return _typed(a) >> copy(len(axes)) >> body >> join


def _merged(parts: tuple[Axis, Axis], out: Axis, name: str = "") -> Term:
    """The two ``parts`` seen as the one axis ``out`` (row-major: the second varies fastest),
    its size derived unless it has one."""
    derived = () if isinstance(out.size, int) else (out,)
    return _p(View(parts, (out,), ((parts[0],), (parts[1],)), (parts,), derived, name=name))


def _sized_as(o: Axis, n: int, what: str) -> Axis:
    """``o`` (the same axis) with the size ``n`` its op gives it."""
    if o.size is None:
        return o.with_size(n)
    if o.size != n:
        raise SizeError(
            f"{what}: {o.describe()} is declared with {o.size} elements but the result has {n}. "
            f"Fix: size it {n} or leave it unsized."
        )
    return o


def tile(a: Axis, o: Axis, repeats: int, name: str) -> Term:
    r = _count("tile", "repeats", repeats, 1)
    rep = Axis(f"{a.name}_tile", size=r)
    return _typed(a) >> _lift(rep) >> _merged((rep, a), o, name)


def repeat_interleave(a: Axis, o: Axis, repeats: int, name: str) -> Term:
    r = _count("repeat_interleave", "repeats", repeats, 1)
    rep = Axis(f"{a.name}_each", size=r)
    return _typed(a) >> _lift(rep) >> _merged((a, rep), o, name)


def stack(s: Axis, n: int, name: str) -> Term:
    k = _count("stack", "n", n, 1)
    ones = tuple(Axis(f"{s.name}_{i}", size=1) for i in range(k))
    lifts = _lift(ones[0])
    for one in ones[1:]:
        lifts = lifts @ _lift(one)
    return lifts >> _p(Concat(ones, _sized_as(s, k, "stack"), name=name))
