"""``ncd.grad``: the reverse derivative of a model as a graph rewrite.

``grad(model)`` walks the model's graph once forward, rebuilding every node through a rule of
``GRAD_RULES`` (keyed by op class, registered with ``@grad_rule`` like every other table), and
once in reverse, calling the vector-Jacobian product each rule recorded. What comes out is an
ordinary ``Graph`` built from core's own ops (einsum, elementwise maps, reductions, views,
constants, masks), so the reference, every code generator and every exporter run it as they run
any model. Its outputs are the model's outputs, then one gradient per requested parameter or
input; ``GradModel`` (a thin wrapper with ``.graph``) packs them as ``(outputs, grads)``.

Rules that read a parameter in the backward pass (linear maps, affine norms) lower the op into
a ``Parameter`` source feeding parameter-free ops, so every residual is an explicit wire and a
parameter keeps its name, shape and initialiser. A value read twice receives the sum of its
cotangents; a value lifted over an axis (a weight used at every position) has its cotangent
summed over that axis. Integer wires carry no cotangent.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any, Literal

import attrs

from ncd._lower import Builder
from ncd.axis import ArrayType, Axis, show
from ncd.dtypes import DType, float32
from ncd.errors import NcdError
from ncd.graph import Graph, Scope, as_graph
from ncd.op import Op, pinned_format, registrar
from ncd.primitives import indexing as X
from ncd.primitives import library as L
from ncd.primitives import random as RND
from ncd.primitives.batchnorm import BatchNorm
from ncd.primitives.window import Window
from ncd.sizes import Config
from ncd.walk import rule_for

__all__ = [
    "GRAD_RULES",
    "GradError",
    "GradModel",
    "IntegerGradError",
    "NoGradRuleError",
    "SeedError",
    "Tape",
    "grad",
    "grad_rule",
]


class GradError(NcdError, ValueError):
    """A gradient that cannot be derived as asked."""


class NoGradRuleError(GradError, NotImplementedError):
    """An op on the path from a requested variable to an output has no rule in ``GRAD_RULES``."""


class IntegerGradError(GradError, TypeError):
    """A gradient asked of an integer (or bool) input: such wires carry no gradient."""


class SeedError(GradError):
    """A model without a scalar float output, and no seed cotangent given."""


#: The cotangent of a node's output(s) -> the cotangents of its inputs (``None``: none, or not
#: needed). Called by the reverse walk with ``need[k]`` telling whether input k wants one.
Backward = Callable[["Tape", list[int | None], list[bool]], Sequence[int | None]]

#: op class -> rule(tape, op, inputs) -> outputs. A rule rebuilds the op's forward (usually
#: ``tape.emit`` of the op itself, or a lowering into simpler ops through ``tape.forward``) and
#: records the backward with ``tape.record``.
Rule = Callable[["Tape", Any, list[int]], list[int]]
GRAD_RULES: dict[type[Op], Rule] = {}

#: ``@grad_rule(OpClass, ...)`` registers a rule in ``GRAD_RULES``.
grad_rule = registrar(GRAD_RULES)

#: 2^100: ``step(x) = min(relu(x) * 2^100, 1)`` is the indicator of ``x > 0`` from core ops
#: (exact for |x| >= 2^-100; smaller positive values get a fraction).
_BIG = 2.0**100
_SITE = "ncd.grad"


@attrs.frozen
class _Step:
    inputs: tuple[int, ...]
    outputs: tuple[int, ...]
    backward: Backward
    scope: int
    op: Op
    path: str


class Tape:
    """The builder of a gradient graph: forward values, recorded backward steps and helpers
    that emit core ops on concrete axes (rules use these)."""

    def __init__(self, graph: Graph, wanted: set[str]) -> None:
        self.graph = graph
        self.b = Builder(graph.scopes[0])
        self.wanted = wanted
        self.steps: list[_Step] = []
        self.active: set[int] = set()
        self.param_ct: dict[str, list[int]] = {}
        self.param_axes: dict[str, tuple[Axis, ...]] = {}
        self.path = ""  # the parameter path of the node being rebuilt
        self._fwd_scope: dict[int, int] = {0: 0}
        self._bwd_scope: dict[int, int] = {0: 0}
        self._fwd_inverse: dict[int, int] = {}

    # -- values --------------------------------------------------------------------------------
    def axes(self, v: int) -> tuple[Axis, ...]:
        return self.b.values[v].axes

    def dtype(self, v: int) -> DType:
        return self.b.values[v].dtype

    def is_float(self, v: int) -> bool:
        return self.b.values[v].is_float

    def emit(self, op: Op, ins: Sequence[int]) -> list[int]:
        """Append one node; an op with parameters gets the current node's parameter path."""
        outs = [int(o) for o in self.b.apply(op, list(ins), _SITE)]
        # a stop_gradient's output depends on no variable, so no backward reaches through it
        stopped = isinstance(op, L.Unary) and op.fn == "stop_gradient"
        live = not stopped and any(v in self.active for v in ins)
        if op.params():
            self.b.nodes[-1] = attrs.evolve(self.b.nodes[-1], path=self.path)
            for name, p in self.b.nodes[-1].params():
                self.param_axes[name] = p.axes
                live = live or name in self.wanted
        if live:
            self.active.update(o for o in outs if self.is_float(o))
        return outs

    def one(self, op: Op, *ins: int) -> int:
        (out,) = self.emit(op, ins)
        return out

    def record(self, op: Op, ins: Sequence[int], outs: Sequence[int], backward: Backward) -> None:
        """Register the backward of ``op`` (inputs ``ins``, outputs ``outs``)."""
        if any(o in self.active for o in outs):
            self.steps.append(_Step(tuple(ins), tuple(outs), backward, self.b.scope, op, self.path))

    def forward(self, op: Op, ins: Sequence[int]) -> list[int]:
        """Rebuild ``op`` on ``ins`` through its rule (a rule lowering into simpler ops calls
        this for each of them)."""
        rule = rule_for(GRAD_RULES, op)
        if rule is None:
            wanted = any(f"{self.path}.{p.name}" in self.wanted for p in op.params())
            if not wanted and not any(v in self.active for v in ins):
                return self.emit(op, ins)  # constant with respect to every variable
            raise NoGradRuleError(
                f"ncd.grad: op {op.kind!r} ({op.label}, {type(op).__name__}) has no gradient "
                "rule, and a requested variable flows through it. Fix: register one with "
                "@ncd.autodiff.grad_rule(" + type(op).__name__ + ") (see ncd/autodiff.py), or "
                "ask for gradients only of variables that do not flow through it (wrt=[...])."
            )
        return rule(self, op, list(ins))

    def param(self, op: Op, name: str) -> int:
        """The value of the current node's parameter ``name`` (a ``Parameter`` source)."""
        p = next(q for q in op.params() if q.name == name)
        init = p.init if p.init in ("normal", "zeros", "ones") else "normal"
        src = L.Parameter(p.axes, init, param=name, dtype=op.dtype, name=op.name)
        return self.forward(src, [])[0]

    # -- op helpers on concrete axes ------------------------------------------------------------
    def like(self, v: int) -> DType | None:
        fmt = self.dtype(v)
        return None if fmt == float32 or not fmt.is_float else fmt

    def const(self, value: float, axes: Sequence[Axis], like: int) -> int:
        return self.one(L.Constant(value, tuple(axes), dtype=self.like(like)))

    def u(self, fn: str, x: int) -> int:
        return self.one(L.Unary(fn), x)

    def bin(self, fn: str, a: int, b: int) -> int:
        return self.one(L.Binary(fn), a, b)

    def sc(self, fn: str, x: int, c: float, reverse: bool = False) -> int:
        return self.one(L.Scalar(fn, float(c), reverse), x)

    def reduce(self, fn: str, x: int, axes: Sequence[Axis]) -> int:
        return self.one(L.Reduce(fn, tuple(axes)), x)

    def step(self, x: int) -> int:
        """1 where ``x > 0``, else 0 (see ``_BIG``)."""
        return self.sc("min", self.sc("mul", self.u("relu", x), _BIG), 1.0)

    def fit(self, v: int, axes: Sequence[Axis]) -> int:
        """``v`` as a value over exactly ``axes`` (in order): axes it has beyond them are
        summed away (un-broadcast), axes it lacks are broadcast."""
        have, want = self.axes(v), tuple(axes)
        if have == want:
            return v
        missing = tuple(a for a in want if a not in have)
        if not missing:
            return self.one(L.Einsum((have,), want), v)
        ones = self.const(1.0, missing, v)
        return self.one(L.Einsum((have, missing), want), v, ones)

    def total(self, parts: Iterable[int], axes: Sequence[Axis]) -> int | None:
        """The sum of cotangent contributions, over ``axes`` (copy becomes sum)."""
        out: int | None = None
        for p in parts:
            p = self.fit(p, axes)
            out = p if out is None else self.fit(self.bin("add", out, p), axes)
        return out

    # -- scopes ---------------------------------------------------------------------------------
    def enter(self, scope: int, backward: bool = False) -> None:
        """Put the next nodes in the builder's copy of the model's ``scope`` (its backward
        twin, named ``<definition>_grad``, when ``backward``)."""
        table = self._bwd_scope if backward else self._fwd_scope
        self.b.scope = self._scope(scope, table, backward)

    def _scope(self, s: int, table: dict[int, int], backward: bool) -> int:
        if s in table:
            return table[s]
        sc = self.graph.scopes[s]
        parent = self._scope(sc.parent if sc.parent is not None else 0, table, backward)
        name = f"{sc.name}_grad" if backward else sc.name
        self.b.scopes.append(Scope(name, sc.label, parent))
        table[s] = len(self.b.scopes) - 1
        return table[s]


def _simple(
    make: Callable[[Tape, Any, list[int], list[int], list[int | None], list[bool]], Sequence[Any]],
) -> Rule:
    """A rule that rebuilds the op as it is and records ``make`` as its backward."""

    def rule(t: Tape, op: Any, xs: list[int]) -> list[int]:
        ys = t.emit(op, xs)

        def backward(t: Tape, cts: list[int | None], need: list[bool]) -> Sequence[int | None]:
            return make(t, op, xs, ys, cts, need)

        t.record(op, xs, ys, backward)
        return ys

    return rule


def _vjp(
    *classes: type[Op],
) -> Callable[
    [Callable[[Tape, Any, list[int], list[int], list[int | None], list[bool]], Sequence[Any]]],
    Rule,
]:
    """``@_vjp(OpClass)`` on ``backward(t, op, xs, ys, cts, need)``: a simple rule."""

    def deco(
        fn: Callable[
            [Tape, Any, list[int], list[int], list[int | None], list[bool]], Sequence[Any]
        ],
    ) -> Rule:
        rule = _simple(fn)
        grad_rule(*classes)(rule)
        return rule

    return deco


# -- sources and wiring ------------------------------------------------------------------------


@_vjp(L.Learned, L.Parameter)
def _source(t: Tape, op: L.Learned, xs: list[int], ys: list[int], cts: Any, need: Any) -> Any:
    (p,) = op.params()
    name = f"{t.path}.{p.name}" if t.path else p.name
    if cts[0] is not None and name in t.wanted:
        t.param_ct.setdefault(name, []).append(cts[0])
    return []


@_vjp(L.Constant, X.Arange, RND.Random)
def _constant(t: Tape, op: L.Constant, xs: list[int], ys: list[int], cts: Any, need: Any) -> Any:
    return []


@grad_rule(L.Dropout)
def _dropout(t: Tape, op: L.Dropout, xs: list[int]) -> list[int]:
    if op.seed is None:
        return list(xs)  # inference: the identity (the gradient model has no dropout)
    # seeded: y = x * mask / (1 - p) with the mask a function of the position, so the
    # backward is the same op on the cotangent (same seed, same positions: the same mask)
    ys = t.emit(op, xs)
    t.record(op, xs, ys, lambda tape, cts, need: [tape.one(op, cts[0]) if cts[0] else None])
    return ys


@_vjp(L.View)
def _view(t: Tape, op: L.View, xs: list[int], ys: list[int], cts: Any, need: Any) -> Any:
    inverse = L.View(op.out_axes, op.in_axes, op.out_parts, op.in_parts, op.derived)
    return [t.one(inverse, cts[0])]


@_vjp(X.Gather)
def _gather(t: Tape, op: X.Gather, xs: list[int], ys: list[int], cts: Any, need: Any) -> Any:
    # the transpose of a read at the ids scatters the cotangent back onto the rows it read
    # (repeated ids add): a one-hot contraction, summed over the ids' own axes
    ids, table, ct = xs[0], xs[1], cts[0]
    if not need[1]:
        return [None, None]
    hot = one_hot(t, ids, op.axis, like=ct)
    return [None, t.one(L.Einsum((t.axes(hot), t.axes(ct)), t.axes(table)), hot, ct)]


@_vjp(X.Where)
def _where(t: Tape, op: X.Where, xs: list[int], ys: list[int], cts: Any, need: Any) -> Any:
    cond, ct = xs[0], cts[0]
    zero = t.const(0.0, t.axes(ct), ct)
    dx = t.one(X.Where(), cond, ct, zero) if need[1] else None
    dy = t.one(X.Where(), cond, zero, ct) if need[2] else None
    return [None, dx, dy]  # the condition selects: no gradient


def _size(t: Tape, a: Axis, op: Op) -> int:
    n = t.graph.size(a)
    if n is None:
        raise GradError(
            f"ncd.grad: the gradient of {op.label} needs the size of {a.describe()}, which is "
            "left to run time. Fix: bind it (model.bind(...)) before ncd.grad."
        )
    return n


@_vjp(X.Concat)
def _concat(t: Tape, op: X.Concat, xs: list[int], ys: list[int], cts: Any, need: Any) -> Any:
    out, start = [], 0
    for k, a in enumerate(op.axes_):  # each input's cotangent: its stretch of the result
        out.append(t.one(X.Slice(op.out, a, start), cts[0]) if need[k] else None)
        start += _size(t, a, op)
    return out


@_vjp(X.Slice)
def _slice(t: Tape, op: X.Slice, xs: list[int], ys: list[int], cts: Any, need: Any) -> Any:
    # the cotangent back in place along the sliced axis, zeros before and after it
    n, m = _size(t, op.axis, op), _size(t, op.out, op)
    first = op.first(n, m)
    parts: list[Axis] = []
    ins: list[int] = []
    for size, where in ((first, "before"), (n - first - m, "after")):
        if size > 0:
            gap = Axis(f"{op.axis.name}_{where}", size=size)
            parts.append(gap)
            ins.append(t.const(0.0, (gap,), cts[0]))
    if first > 0:
        axes, vals = [parts[0], op.out, *parts[1:]], [ins[0], cts[0], *ins[1:]]
    else:
        axes, vals = [op.out, *parts], [cts[0], *ins]
    return [t.one(X.Concat(tuple(axes), op.axis), *vals)]


@_vjp(X.Rotary)
def _rotary(t: Tape, op: X.Rotary, xs: list[int], ys: list[int], cts: Any, need: Any) -> Any:
    # a rotation at each position: its transpose is the rotation by minus the angles
    return [t.one(attrs.evolve(op, inverse=not op.inverse, name=""), cts[0])]


@_vjp(L.Cast)
def _cast(t: Tape, op: L.Cast, xs: list[int], ys: list[int], cts: Any, need: Any) -> Any:
    if not t.is_float(xs[0]):
        return [None]
    return [t.one(L.Cast(t.dtype(xs[0])), cts[0])]


@_vjp(L.CausalMask)
def _mask(t: Tape, op: L.CausalMask, xs: list[int], ys: list[int], cts: Any, need: Any) -> Any:
    return [t.one(L.CausalMask(op.q, op.x, "0"), cts[0])]


@_vjp(L.Scale)
def _scale(t: Tape, op: L.Scale, xs: list[int], ys: list[int], cts: Any, need: Any) -> Any:
    return [t.one(L.Scale(op.by, op.power), cts[0])]


def _identity(t: Tape, a: Axis, b: Axis, like: int) -> int:
    """``[a b]``: 1.0 where the two indices are equal (``|a| == |b|``), in ``like``'s format:
    two index ramps, each O(|a|), compared (``_compare``)."""
    return t.one(L.Cast(t.dtype(like)), _compare(t, "eq", a, b))


def _compare(t: Tape, fn: str, left: Axis | int, b: Axis) -> int:
    """``left fn ramp(b)``, a ``bool`` wire; ``left`` is an axis (its index ramp) or a float32
    value. Positions are compared in float32 whatever the model's format (``pinned_format``),
    so they are exact up to 2^24 (bfloat16 is exact only to 256)."""
    with pinned_format(float32):
        if isinstance(left, Axis):
            left = t.one(X.Arange(left))
        return t.bin(fn, left, t.one(X.Arange(b)))


@_vjp(Window)
def _window(t: Tape, op: Window, xs: list[int], ys: list[int], cts: Any, need: Any) -> Any:
    # The transpose of a window scatters each tap back onto the input element it read:
    # dx[i] = sum over (o, j) with o*s + j'*d - p = i*u of ct[o, j] (j' the tap, j or its
    # reverse). That is again a window, over the positions: the cotangent spread ``stride``
    # apart, read ``upsample`` apart with the offsets reversed, which puts at [i, j2] the
    # element ct[(i*u + p - j2'*d) / s, j] of every j; the taps with j2 == j are kept (an
    # identity over the two offset axes) and summed. Its padding (k-1)*d - p may be negative
    # (a 1-wide kernel padded by 1): then ``a`` more positions are made in front and sliced off.
    n, m, k = _size(t, op.axis, op), _size(t, op.out, op), _size(t, op.k, op)
    s, p, d, u = op.stride, op.padding, op.dilation, op.upsample
    ahead = -(-max(0, p - (k - 1) * d) // u)  # ceil: positions in front to slice off
    pad = (k - 1) * d - p + ahead * u
    # the least end padding giving ahead + n positions, never cutting into the cotangent
    least = (ahead + n - 1) * u + d * (k - 1) + 1 - ((m - 1) * s + 1 + 2 * pad)
    extra = max(least, -pad)
    size = ((m - 1) * s + 1 + 2 * pad + extra - d * (k - 1) - 1) // u + 1
    whole = op.axis if ahead == 0 and size == n else Axis(f"{op.axis.name}_taps", size=size)
    taps = Axis(f"{op.k.name}_back", size=k)
    back = Window(
        op.out,
        whole,
        taps,
        stride=u,
        padding=pad,
        dilation=d,
        upsample=s,
        extra=extra,
        reverse=not op.reverse,
    )
    spread = t.one(back, cts[0])
    eye = _identity(t, taps, op.k, cts[0])
    rest = tuple(a for a in t.axes(spread) if a not in (taps, op.k))
    dx = t.one(L.Einsum((t.axes(spread), t.axes(eye)), rest), spread, eye)
    if whole != op.axis:
        dx = t.one(X.Slice(whole, op.axis, ahead), dx)
    return [dx]


@grad_rule(BatchNorm)
def _batch_norm(t: Tape, op: BatchNorm, xs: list[int]) -> list[int]:
    # eval form, lowered: (x - running_mean) * rsqrt(running_var + eps) (* weight + bias), so
    # the input and every parameter (the running statistics too) get their cotangent
    fmt = op.dtype
    (c,) = t.forward(L.Binary("sub", dtype=fmt), [xs[0], t.param(op, "running_mean")])
    (r,) = t.forward(L.Scalar("add", op.eps, dtype=fmt), [t.param(op, "running_var")])
    (r,) = t.forward(L.Unary("rsqrt", dtype=fmt), [r])
    (y,) = t.forward(L.Binary("mul", dtype=fmt), [c, r])
    if op.affine:
        (y,) = t.forward(L.Binary("mul", dtype=fmt), [y, t.param(op, "weight")])
        (y,) = t.forward(L.Binary("add", dtype=fmt), [y, t.param(op, "bias")])
    return [y]


# -- contractions and learned maps -------------------------------------------------------------


def _einsum_vjp(t: Tape, op: L.Einsum, xs: list[int], ys: list[int], cts: Any, need: Any) -> Any:
    out: list[int | None] = []
    for k, x in enumerate(xs):
        if not need[k]:
            out.append(None)
            continue
        want = t.axes(x)
        groups = [t.axes(cts[0])]
        ins = [cts[0]]
        for j, other in enumerate(xs):
            if j != k:
                groups.append(t.axes(other))
                ins.append(other)
        seen = {a for g in groups for a in g}
        missing = tuple(a for a in want if a not in seen)  # summed only by this input
        if missing:
            groups.append(missing)
            ins.append(t.const(1.0, missing, cts[0]))
        out.append(t.one(L.Einsum(tuple(groups), want), *ins))
    return out


_vjp(L.Einsum)(_einsum_vjp)


@grad_rule(L.Linear)
def _linear(t: Tape, op: L.Linear, xs: list[int]) -> list[int]:
    if set(op.in_axes) & set(op.out_axes):
        raise NoGradRuleError(
            f"ncd.grad: linear {op.label} maps axes {[a.name for a in op.in_axes]} onto "
            "themselves (its weight repeats an axis), which has no gradient rule yet. Fix: map "
            "to a distinct axis (ops.linear('d -> d2')) and rename back."
        )
    w = t.param(op, "weight")
    ein = L.Einsum((op.in_axes, (*op.out_axes, *op.in_axes)), op.out_axes, dtype=op.dtype)
    (y,) = t.forward(ein, [xs[0], w])
    if op.bias:
        (y,) = t.forward(L.Binary("add", dtype=op.dtype), [y, t.param(op, "bias")])
    return [y]


@grad_rule(L.Embedding)
def _embedding(t: Tape, op: L.Embedding, xs: list[int]) -> list[int]:
    ys = t.emit(op, xs)

    def backward(t: Tape, cts: list[int | None], need: list[bool]) -> Sequence[int | None]:
        name = f"{t.path}.weight" if t.path else "weight"
        ct = cts[0]
        if ct is not None and name in t.wanted:
            hot = one_hot(t, xs[0], op.vocab, like=ct)
            want = (op.vocab, *op.out_axes)
            t.param_ct.setdefault(name, []).append(
                t.one(L.Einsum((t.axes(hot), t.axes(ct)), want), hot, ct)
            )
        return [None]

    t.record(op, xs, ys, backward)
    return ys


def one_hot(t: Tape, ids: int, vocab: Axis, like: int) -> int:
    """``[ids..., vocab]``: 1.0 where the id equals the index: the ids cast to float against an
    index ramp over ``vocab`` (O(|vocab|) to build; the rows themselves are ``|ids| x |vocab|``)."""
    with pinned_format(float32):
        index = t.one(L.Cast(float32), ids)
    return t.one(L.Cast(t.dtype(like)), _compare(t, "eq", index, vocab))


# -- elementwise -------------------------------------------------------------------------------


def _phi(t: Tape, x: int) -> int:
    """The standard normal CDF from core ops: ``gelu(x) / x`` where ``|x| >= 1e-3``, its Taylor
    series below (both exact to float64 rounding)."""
    small = 1e-3
    m = t.step(t.sc("sub", t.u("abs", x), small))  # 1 where |x| > small
    off = t.sc("sub", m, 1.0, reverse=True)  # 1 - m
    safe = t.bin("add", x, off)  # never 0 where m = 1 is used
    ratio = t.bin("div", t.u("gelu", x), safe)
    c = 1.0 / math.sqrt(2.0 * math.pi)
    series = t.sc(
        "add", t.sc("mul", t.bin("mul", x, t.sc("sub", t.u("square", x), 6.0, True)), c / 6.0), 0.5
    )
    return t.bin("add", t.bin("mul", m, ratio), t.bin("mul", off, series))


def _unary_slope(t: Tape, fn: str, x: int, y: int) -> int:
    """dy/dx of ``y = fn(x)``, as a value."""
    if fn == "exp":
        return y
    if fn == "log":
        return t.u("recip", x)
    if fn == "sqrt":
        return t.sc("mul", t.u("recip", y), 0.5)
    if fn == "rsqrt":
        return t.sc("mul", t.bin("mul", t.u("square", y), y), -0.5)
    if fn == "abs":
        return t.bin("sub", t.step(x), t.step(t.u("neg", x)))
    if fn == "neg":
        return t.sc("mul", t.const(1.0, (), x), -1.0)
    if fn == "relu":
        return t.step(x)
    if fn == "gelu":
        density = t.sc(
            "mul", t.u("exp", t.sc("mul", t.u("square", x), -0.5)), 1 / math.sqrt(2 * math.pi)
        )
        return t.bin("add", _phi(t, x), t.bin("mul", x, density))
    if fn == "gelu_tanh":
        k = math.sqrt(2.0 / math.pi)
        inner = t.sc(
            "mul", t.bin("add", x, t.sc("mul", t.bin("mul", t.u("square", x), x), 0.044715)), k
        )
        th = t.u("tanh", inner)
        sech2 = t.sc("sub", t.u("square", th), 1.0, reverse=True)
        dinner = t.sc("mul", t.sc("add", t.sc("mul", t.u("square", x), 3 * 0.044715), 1.0), k)
        left = t.sc("mul", t.sc("add", th, 1.0), 0.5)
        return t.bin("add", left, t.sc("mul", t.bin("mul", x, t.bin("mul", sech2, dinner)), 0.5))
    if fn == "silu":
        s = t.u("sigmoid", x)
        return t.bin("mul", s, t.sc("add", t.bin("mul", x, t.sc("sub", s, 1.0, True)), 1.0))
    if fn == "sigmoid":
        return t.bin("mul", y, t.sc("sub", y, 1.0, reverse=True))
    if fn == "tanh":
        return t.sc("sub", t.u("square", y), 1.0, reverse=True)
    if fn == "square":
        return t.sc("mul", x, 2.0)
    if fn == "recip":
        return t.u("neg", t.u("square", y))
    if fn == "cos":
        return t.u("neg", t.u("sin", x))
    if fn == "sin":
        return t.u("cos", x)
    if fn == "atan":
        return t.u("recip", t.sc("add", t.u("square", x), 1.0))
    if fn == "asinh":
        return t.u("rsqrt", t.sc("add", t.u("square", x), 1.0))
    slope = _more_slopes(t, fn, x, y)
    if slope is None:
        raise NoGradRuleError(
            f"ncd.grad: unary {fn!r} has no gradient rule. Fix: add it to "
            "ncd.autodiff._unary_slope."
        )
    return slope


def _select(t: Tape, cond: int, a: int, b: int) -> int:
    return t.one(X.Where(), cond, a, b)


def _inside(t: Tape, x: int, low: float, high: float) -> int:
    """1.0 where ``low < x < high``, else 0.0 (exact comparisons, NaN gives 0)."""
    return t.bin("mul", t.sc("gt", x, low), t.sc("lt", x, high))


def _more_slopes(t: Tape, fn: str, x: int, y: int) -> int | None:
    """dy/dx of the rest of the elementwise family (issue 15)."""
    if fn == "erf":
        return t.sc("mul", t.u("exp", t.u("neg", t.u("square", x))), 2.0 / math.sqrt(math.pi))
    if fn == "tan":
        return t.sc("add", t.u("square", y), 1.0)
    if fn in ("asin", "acos"):
        r = t.u("rsqrt", t.sc("sub", t.u("square", x), 1.0, reverse=True))
        return r if fn == "asin" else t.u("neg", r)
    if fn in ("sinh", "cosh"):
        return t.u("cosh" if fn == "sinh" else "sinh", x)
    if fn == "atanh":
        return t.u("recip", t.sc("sub", t.u("square", x), 1.0, reverse=True))
    if fn == "acosh":
        return t.u("rsqrt", t.sc("sub", t.u("square", x), 1.0))
    if fn == "expm1":
        return t.sc("add", y, 1.0)
    if fn == "log1p":
        return t.u("recip", t.sc("add", x, 1.0))
    if fn == "selu":
        below = t.sc("mul", t.u("exp", x), L.SELU_SCALE * L.SELU_ALPHA)
        return _select(t, t.sc("gt", x, 0.0), t.const(L.SELU_SCALE, (), x), below)
    if fn == "mish":
        th = t.u("tanh", t.u("log1p", t.u("exp", x)))  # tanh(softplus(x))
        sech2 = t.sc("sub", t.u("square", th), 1.0, reverse=True)
        return t.bin("add", th, t.bin("mul", x, t.bin("mul", sech2, t.u("sigmoid", x))))
    if fn == "hardswish":
        middle = t.sc("add", t.sc("mul", x, 1.0 / 3.0), 0.5)  # (2x + 3) / 6
        return _select(
            t,
            t.sc("lt", x, -3.0),
            t.const(0.0, (), x),
            _select(t, t.sc("le", x, 3.0), middle, t.const(1.0, (), x)),
        )
    if fn == "hardsigmoid":
        return t.sc("mul", _inside(t, x, -3.0, 3.0), 1.0 / 6.0)
    if fn == "softsign":
        return t.u("recip", t.u("square", t.sc("add", t.u("abs", x), 1.0)))
    if fn == "logsigmoid":
        return t.u("sigmoid", t.u("neg", x))
    if fn == "relu6":
        return _inside(t, x, 0.0, 6.0)
    return None


def _activation_slope(t: Tape, op: L.Activation, x: int, y: int) -> int:
    one = t.const(1.0, (), x)
    a = op.alpha
    if op.fn == "leaky_relu":
        return _select(t, t.sc("gt", x, 0.0), one, t.const(a, (), x))
    if op.fn == "elu":
        return _select(t, t.sc("gt", x, 0.0), one, t.sc("add", y, a))
    if op.fn == "celu":
        return _select(t, t.sc("gt", x, 0.0), one, t.u("exp", t.sc("mul", x, 1.0 / a)))
    bx = t.sc("mul", x, a)  # softplus: beta, threshold = alpha, beta
    return _select(t, t.sc("gt", bx, op.beta), one, t.u("sigmoid", bx))


@_vjp(L.Activation)
def _activation(
    t: Tape, op: L.Activation, xs: list[int], ys: list[int], cts: Any, need: Any
) -> Any:
    return [t.bin("mul", cts[0], _activation_slope(t, op, xs[0], ys[0]))]


@_vjp(L.Unary)
def _unary(t: Tape, op: L.Unary, xs: list[int], ys: list[int], cts: Any, need: Any) -> Any:
    if op.fn == "neg":
        return [t.u("neg", cts[0])]
    if op.fn in L.STEP_FNS or op.fn == "stop_gradient":
        return [None]  # flat wherever it has a derivative; stop_gradient: by definition
    return [t.bin("mul", cts[0], _unary_slope(t, op.fn, xs[0], ys[0]))]


@_vjp(L.Binary)
def _binary(t: Tape, op: L.Binary, xs: list[int], ys: list[int], cts: Any, need: Any) -> Any:
    (a, b), y, ct = xs, ys[0], cts[0]
    fn = op.fn
    if fn in L.COMPARISONS or fn == "floordiv":
        return [None, None]  # a step in its operands: zero almost everywhere
    if fn == "mod":  # a - b floor(a / b): the floor is a step
        db = t.bin("mul", t.u("neg", ct), t.bin("floordiv", a, b)) if need[1] else None
        return [ct, db]
    if fn == "add":
        return [ct, ct]
    if fn == "sub":
        return [ct, t.u("neg", ct) if need[1] else None]
    if fn == "mul":
        return [t.bin("mul", ct, b) if need[0] else None, t.bin("mul", ct, a) if need[1] else None]
    if fn == "div":
        da = t.bin("div", ct, b) if need[0] else None
        db = t.u("neg", t.bin("div", t.bin("mul", ct, y), b)) if need[1] else None
        return [da, db]
    if fn in ("max", "min"):
        # max: a wins ties; min: a wins ties
        other_wins = t.step(t.bin("sub", b, a) if fn == "max" else t.bin("sub", a, b))
        keep_a = t.sc("sub", other_wins, 1.0, reverse=True)
        return [t.bin("mul", ct, keep_a), t.bin("mul", ct, other_wins)]
    if fn == "pow":
        da = (
            t.bin("mul", ct, t.bin("mul", b, t.bin("pow", a, t.sc("sub", b, 1.0))))
            if need[0]
            else None
        )
        db = t.bin("mul", ct, t.bin("mul", y, t.u("log", a))) if need[1] else None
        return [da, db]
    raise NoGradRuleError(f"ncd.grad: binary {fn!r} has no gradient rule.")


@_vjp(L.Scalar)
def _scalar(t: Tape, op: L.Scalar, xs: list[int], ys: list[int], cts: Any, need: Any) -> Any:
    x, y, ct, c, rev = xs[0], ys[0], cts[0], op.const, op.reverse
    fn = op.fn
    if fn in L.COMPARISONS or fn == "floordiv":
        return [None]
    if fn == "mod":  # x % c: slope 1; c % x: -floor(c / x)
        return [t.bin("mul", t.u("neg", ct), t.sc("floordiv", x, c, reverse=True)) if rev else ct]
    if fn == "add":
        return [ct]
    if fn == "sub":
        return [t.u("neg", ct) if rev else ct]
    if fn == "mul":
        return [t.sc("mul", ct, c)]
    if fn == "div":
        if rev:  # c / x
            return [t.u("neg", t.bin("div", t.bin("mul", ct, y), x))]
        return [t.sc("div", ct, c)]
    if fn in ("max", "min"):
        # x wins ties
        lose = t.step(t.sc("sub", x, c, reverse=True) if fn == "max" else t.sc("sub", x, c))
        return [t.bin("mul", ct, t.sc("sub", lose, 1.0, reverse=True))]
    if fn == "pow":
        if rev:  # c ** x
            if c <= 0:
                raise GradError(
                    f"ncd.grad: {c:g} ** x has no real derivative in x (the base is not "
                    "positive). Fix: use a positive base, or exp(x * log(c)) for c > 0."
                )
            return [t.sc("mul", t.bin("mul", ct, y), math.log(c))]
        return [t.sc("mul", t.bin("mul", ct, t.sc("pow", x, c - 1.0)), c)]
    raise NoGradRuleError(f"ncd.grad: scalar {fn!r} has no gradient rule.")


# -- reductions and normalisers ----------------------------------------------------------------


@_vjp(L.Reduce)
def _reduce(t: Tape, op: L.Reduce, xs: list[int], ys: list[int], cts: Any, need: Any) -> Any:
    x, y, ct = xs[0], ys[0], cts[0]
    full = t.axes(x)
    if op.fn == "sum":
        return [t.fit(ct, full)]
    if op.fn == "mean":
        return [t.one(L.Scale(op.axes_, -1.0), t.fit(ct, full))]
    if op.fn == "prod":  # d prod / dx_i = prod_{j != i} x_j, exact where some x_j = 0
        return [t.fit(t.bin("mul", ct, _exclusive(t, x, op.axes_)), full)]
    if op.fn == "logsumexp":  # d lse / dx_i = exp(x_i - lse): the softmax of x
        return [t.bin("mul", t.u("exp", t.bin("sub", x, y)), ct)]
    # max / min: the cotangent goes to every position that attains the extremum
    gap = t.bin("sub", y, x) if op.fn == "max" else t.bin("sub", x, y)
    hit = t.sc("sub", t.step(gap), 1.0, reverse=True)
    return [t.bin("mul", hit, ct)]


def _exclusive(t: Tape, x: int, axes: Sequence[Axis]) -> int:
    """The product over ``axes`` of every element of ``x`` but the one at each position (not
    ``prod / x_i``, which is 0/0 at a zero). Over several axes: the product over the rest of the
    other rows of the first axis, times the exclusive product within the position's own row."""
    a, rest = axes[0], tuple(axes[1:])
    if rest:
        own = _exclusive(t, x, rest)
        rows = _exclusive(t, t.reduce("prod", x, rest), (a,))
        return t.bin("mul", own, rows)
    other = Axis(f"{a.name}_other", size=a.size)
    x_other = t.one(L.View((a,), (other,), ((a,),), ((a,),), ()), x)
    skip = _compare(t, "ne", a, other)
    kept = t.one(X.Where(), skip, x_other, t.const(1.0, (), x))
    return t.reduce("prod", kept, (other,))


@_vjp(L.Softmax)
def _softmax(t: Tape, op: L.Softmax, xs: list[int], ys: list[int], cts: Any, need: Any) -> Any:
    y, ct = ys[0], cts[0]
    s = t.reduce("sum", t.bin("mul", ct, y), (op.axis,))
    return [t.bin("mul", y, t.bin("sub", ct, s))]


@_vjp(L.L2Norm)
def _l2norm(t: Tape, op: L.L2Norm, xs: list[int], ys: list[int], cts: Any, need: Any) -> Any:
    x, y, ct = xs[0], ys[0], cts[0]
    r = t.u("sqrt", t.sc("add", t.reduce("sum", t.u("square", x), (op.axis,)), op.eps))
    s = t.reduce("sum", t.bin("mul", ct, y), (op.axis,))
    return [t.bin("div", t.bin("sub", ct, t.bin("mul", y, s)), r)]


def _affine(t: Tape, op: Any, xs: list[int], core: Op, bias: bool) -> list[int]:
    """A norm with learned scale (and shift): the plain norm, then ``* weight (+ bias)``."""
    (y,) = t.forward(core, xs)
    (y,) = t.forward(L.Binary("mul", dtype=op.dtype), [y, t.param(op, "weight")])
    if bias:
        (y,) = t.forward(L.Binary("add", dtype=op.dtype), [y, t.param(op, "bias")])
    return [y]


def _layernorm_vjp(
    t: Tape, op: L.LayerNorm, xs: list[int], ys: list[int], cts: Any, need: Any
) -> Any:
    x, y, ct = xs[0], ys[0], cts[0]
    ax = op.axes_
    centred = t.bin("sub", x, t.reduce("mean", x, ax))
    rstd = t.u("rsqrt", t.sc("add", t.reduce("mean", t.u("square", centred), ax), op.eps))
    mg = t.reduce("mean", ct, ax)
    mgy = t.reduce("mean", t.bin("mul", ct, y), ax)
    inner = t.bin("sub", t.bin("sub", ct, mg), t.bin("mul", y, mgy))
    return [t.bin("mul", inner, rstd)]


@grad_rule(L.LayerNorm)
def _layernorm(t: Tape, op: L.LayerNorm, xs: list[int]) -> list[int]:
    if op.affine:
        return _affine(t, op, xs, attrs.evolve(op, affine=False, name=""), op.bias)
    return _simple(_layernorm_vjp)(t, op, xs)


def _rmsnorm_vjp(t: Tape, op: L.RMSNorm, xs: list[int], ys: list[int], cts: Any, need: Any) -> Any:
    x, y, ct = xs[0], ys[0], cts[0]
    ax = op.axes_
    rr = t.u("rsqrt", t.sc("add", t.reduce("mean", t.u("square", x), ax), op.eps))
    mgy = t.reduce("mean", t.bin("mul", ct, y), ax)
    return [t.bin("mul", t.bin("sub", ct, t.bin("mul", y, mgy)), rr)]


@grad_rule(L.RMSNorm)
def _rmsnorm(t: Tape, op: L.RMSNorm, xs: list[int]) -> list[int]:
    if op.affine:
        return _affine(t, op, xs, attrs.evolve(op, affine=False, name=""), False)
    return _simple(_rmsnorm_vjp)(t, op, xs)


# -- the transform -----------------------------------------------------------------------------

Wrt = Literal["params", "inputs"] | Sequence[str | int]


# -- normalised contractions: FlashAttention-2's backward --------------------------------------

#: ops a backward recomputes the scores of a normalised contraction with (deterministic, free
#: of parameters): the scores are then never read back from memory
_RECOMPUTED = (L.Einsum, L.Scale, L.CausalMask, L.Binary, L.Scalar, L.Unary, L.Cast)


def _softmax_stat(t: Tape, op: L.Softmax, s: int) -> int:
    return t.reduce("logsumexp", s, (op.axis,))


def _l2_stat(t: Tape, op: L.L2Norm, s: int) -> int:
    return t.u("sqrt", t.sc("add", t.reduce("sum", t.u("square", s), (op.axis,)), op.eps))


#: normaliser -> (its row statistic from the scores, the normalised scores from the scores and
#: the statistic, the scores' cotangent from the scores, the statistic, the normalised scores,
#: their cotangent and ``D = sum_x P dP``)
_FLASH: dict[type[Op], tuple[Callable[..., int], Callable[..., int], Callable[..., int]]] = {
    L.Softmax: (
        _softmax_stat,
        lambda t, s, stat: t.u("exp", t.bin("sub", s, stat)),
        lambda t, s, stat, p, dp, d: t.bin("mul", p, t.bin("sub", dp, d)),
    ),
    L.L2Norm: (
        _l2_stat,
        lambda t, s, stat: t.bin("div", s, stat),
        lambda t, s, stat, p, dp, d: t.bin("div", t.bin("sub", dp, t.bin("mul", p, d)), stat),
    ),
}


@attrs.frozen
class FlashUnit:
    """``O = sum_x norm_x(s) V`` in a model's graph (softmax or the L2 normaliser), the scores
    ``s`` made by ``region`` (cheap nodes whose outputs span every axis of ``s``) from
    ``leaves`` (values with fewer axes: Q, K).

    Its gradient is FlashAttention-2's backward, derived as a graph: the forward also keeps the
    row statistic (``logsumexp_x s``; ``|s|_2`` for L2), which ``ncd.fuse`` streams in the
    forward's own kernel, and the backward recomputes ``P`` from the leaves twice: once for the
    cotangents of the leaves without ``x`` (dQ: a kernel streaming ``x``) and once for those
    with it and for ``V`` (dK, dV: a kernel streaming the rows), with ``D = sum(dO * O)`` in
    place of ``sum_x P dP``. No value spanning both the rows and ``x`` leaves a kernel."""

    normaliser: int
    contraction: int
    region: tuple[int, ...]
    leaves: tuple[int, ...]
    side: int  # where ``P`` sits among the contraction's two inputs

    def record(self, t: Tape, env: dict[int, int]) -> None:
        """After the forward rebuilt the contraction: replace the plain steps of the
        normaliser and the contraction by this unit's backward, and add the row statistic."""
        g = t.graph
        norm, con = g.nodes[self.normaliser], g.nodes[self.contraction]
        p, o = env[norm.outputs[0]], env[con.outputs[0]]
        if o not in t.active:
            return
        t.steps = [st for st in t.steps if st.outputs not in ((p,), (o,))]
        stat = _FLASH[type(norm.op)][0](t, norm.op, env[norm.inputs[0]])
        other = con.inputs[1 - self.side]
        ins = [env[u] for u in (*self.leaves, other)]

        def backward(tape: Tape, cts: list[int | None], need: list[bool]) -> list[int | None]:
            assert cts[0] is not None
            return self._backward(tape, env, stat, cts[0], need)

        t.record(con.op, ins, [o], backward)

    def _backward(
        self, t: Tape, env: dict[int, int], stat: int, d_out: int, need: list[bool]
    ) -> list[int | None]:
        g = t.graph
        norm, con = g.nodes[self.normaliser], g.nodes[self.contraction]
        _, normalise, d_scores = _FLASH[type(norm.op)]
        x, einsum = norm.op.axes()[0], con.op
        assert isinstance(einsum, L.Einsum)
        o, v = env[con.outputs[0]], env[con.inputs[1 - self.side]]
        p_axes = t.axes(env[norm.outputs[0]])
        rest = tuple(a for a in t.axes(o) if a not in p_axes)
        d_row = t.reduce("sum", t.bin("mul", d_out, o), rest)  # = sum_x P dP
        leaves = [env[u] for u in self.leaves]
        grads: list[int | None] = [None] * (len(leaves) + 1)
        scope, path = t.b.scope, t.path
        fwd_scope = t._fwd_scope.get(con.scope, 0)
        for keyed in (False, True):  # dQ streaming x, then dK and dV streaming the rows
            mine = [k for k, u in enumerate(leaves) if (x in t.axes(u)) == keyed and need[k]]
            if not mine and not (keyed and need[-1]):
                continue
            base = len(t.steps)
            made = {u: env[u] for u in self.leaves}
            for i in self.region:
                n = g.nodes[i]
                t.path = n.path
                made.update(zip(n.outputs, t.forward(n.op, [made[u] for u in n.inputs])))
            local = [attrs.evolve(st, scope=fwd_scope) for st in t.steps[base:]]
            del t.steps[base:]
            t.b.scope, t.path = scope, path
            s = made[norm.inputs[0]]
            prob = normalise(t, s, stat)
            xs = [prob, v] if self.side == 0 else [v, prob]
            picks = [k == self.side for k in range(2)]
            d_prob = _einsum_vjp(t, einsum, xs, [o], [d_out], picks)[self.side]
            ct = {s: [d_scores(t, s, stat, prob, d_prob, d_row)]}
            _reverse(t, local, ct, blocked=[leaves[k] for k in range(len(leaves)) if k not in mine])
            t.b.scope, t.path = scope, path
            for k in mine:
                grads[k] = t.total(ct.get(leaves[k], []), t.axes(leaves[k]))
            if keyed and need[-1]:
                others = [not p for p in picks]
                grads[-1] = _einsum_vjp(t, einsum, xs, [o], [d_out], others)[1 - self.side]
        return grads


def flash_units(g: Graph) -> list[FlashUnit]:
    """The normalised contractions of ``g`` whose gradient ``ncd.grad`` derives in
    FlashAttention-2's form: a normaliser read only by a two-input einsum that contracts
    exactly its axis, its scores made by at least one recomputable node."""
    out = []
    for i, n in enumerate(g.nodes):
        if type(n.op) not in _FLASH or n.outputs[0] in g.outputs:
            continue
        (pv,) = n.outputs
        readers = g.consumers[pv]
        if len(readers) != 1:
            continue
        c = g.nodes[readers[0]]
        x = n.op.axes()[0]
        if not isinstance(c.op, L.Einsum) or len(c.inputs) != 2 or len(set(c.inputs)) != 2:
            continue
        side = c.inputs.index(pv)
        if tuple(c.op.contracted) != (x,) or x not in c.op.inputs[1 - side]:
            continue
        want = set(g.values[n.inputs[0]].axes)
        region: set[int] = set()
        leaves: dict[int, None] = {}
        stack, seen = [n.inputs[0]], set()
        while stack:
            u = stack.pop()
            if u in seen:
                continue
            seen.add(u)
            p = g.producers.get(u)
            node = g.nodes[p] if p is not None else None
            if (
                node is None
                or not isinstance(node.op, _RECOMPUTED)
                or node.op.params()
                or len(node.outputs) != 1
                or not want <= set(g.values[u].axes)
                or not g.values[u].is_float
            ):
                leaves.setdefault(u)
                continue
            region.add(p)  # type: ignore[arg-type]
            stack.extend(node.inputs)
        if region:
            out.append(FlashUnit(i, readers[0], tuple(sorted(region)), tuple(leaves), side))
    return out


@attrs.frozen(eq=False)
class GradModel:
    """A gradient model: ``.graph`` is an ordinary graph (outputs: the model's, then one
    gradient per key); ``ncd.run`` and ``ncd.compile`` pack its outputs as ``(outputs, grads)``:
    ``outputs`` one array (or a tuple), ``grads`` a dict by parameter name (``wrt="params"``),
    a tuple by input (``wrt="inputs"``) or a dict by the keys given (``wrt=[...]``)."""

    graph: Graph
    n_outputs: int
    keys: tuple[str | int, ...]
    as_tuple: bool = False

    def pack_outputs(self, outs: Sequence[Any]) -> tuple[Any, Any]:
        first = list(outs[: self.n_outputs])
        value = first[0] if len(first) == 1 else tuple(first)
        grads = list(outs[self.n_outputs :])
        if self.as_tuple:
            return value, tuple(grads)
        return value, dict(zip(self.keys, grads, strict=True))

    def config(self) -> Config:
        """The free sizes, as ``Term.config``."""
        return self.graph.config()

    def bind(self, sizes: Mapping[str | Axis, int] | None = None, /, **kw: int) -> GradModel:
        """The same gradient model with sizes bound (by config label or ``Axis``)."""
        return attrs.evolve(self, graph=self.graph.bind(sizes, **kw))

    def __repr__(self) -> str:
        return f"GradModel({len(self.graph.nodes)} nodes, {len(self.keys)} gradients)"


def grad(
    model: Any, wrt: Wrt = "params", *, cotangents: bool = False, flash: bool = True
) -> GradModel:
    """The reverse derivative of ``model`` as a model.

    ``wrt``: ``"params"`` (every learned parameter, the default), ``"inputs"`` (every input; an
    integer input is an ``IntegerGradError``) or a list of parameter names and input positions.
    The gradient is of the sum of the model's float outputs, each of which must be a scalar;
    ``cotangents=True`` instead adds one input per float output (after the model's own), the
    seed cotangent of that output, for a model with non-scalar outputs. ``flash=False`` keeps
    the plain rules of normalised contractions (the backward then reads the forward's
    probabilities, seq x seq, from memory) instead of ``FlashUnit``'s recomputing backward.
    """
    g = as_graph(model, "ncd.grad")
    params = g.params()
    keys, input_keys = _keys(g, params, wrt)
    wanted = {k for k in keys if isinstance(k, str)}
    t = Tape(g, wanted)
    holes = [t.b.new_slot() for _ in g.inputs]
    env: dict[int, int] = {}
    for hole, v in zip(holes, g.inputs, strict=True):
        env[v] = t.b.materialise(hole, g.values[v])
    for k in input_keys:
        t.active.add(env[g.inputs[k]])
    units = {f.contraction: f for f in flash_units(g)} if flash else {}
    for i, node in enumerate(g.nodes):
        t.enter(node.scope)
        t.path = node.path
        outs = t.forward(node.op, [env[v] for v in node.inputs])
        env.update(zip(node.outputs, outs, strict=True))
        if i in units:
            units[i].record(t, env)
    outputs = [env[v] for v in g.outputs]
    ct: dict[int, list[int]] = {}
    float_outs = [v for v in outputs if t.is_float(v)]
    if not float_outs:
        raise SeedError(
            "ncd.grad: the model has no float output to differentiate. Fix: end it with a loss "
            "such as nn.cross_entropy()."
        )
    t.enter(0, backward=True)
    seed_slots = []
    for v in dict.fromkeys(float_outs):
        if cotangents:
            hole = t.b.new_slot()
            seed_slots.append(hole)
            ct.setdefault(v, []).append(t.b.materialise(hole, t.b.values[v]))
        elif v not in t.active:
            continue  # no variable reaches it (a stop_gradient's): its gradient is zero
        elif t.axes(v):
            raise SeedError(
                f"ncd.grad: output {outputs.index(v)} has axes "
                f"{[a.name for a in t.axes(v)]}, not a scalar, so it needs a seed cotangent. Fix: "
                "reduce it to a scalar (>> ops.sum(...) or a loss such as nn.cross_entropy()), "
                "or pass cotangents=True and feed the seed as an extra input."
            )
        else:
            # 1.0 computed from the output (not a float32 constant), so that float64 arrays fed
            # to a float32 model keep float64 cotangents throughout, as the forward does
            ct.setdefault(v, []).append(t.sc("add", t.sc("mul", v, 0.0), 1.0))
    _reverse(t, t.steps, ct)
    t.b.scope = 0
    grads: list[int] = []
    for key in keys:
        if isinstance(key, str):
            axes = t.param_axes[key]
            total = t.total(t.param_ct.get(key, []), axes)
            fmt = params[key].dtype
        else:
            v = env[g.inputs[key]]
            axes, total, fmt = t.axes(v), t.total(ct.get(v, []), t.axes(v)), t.dtype(v)
        if total is None:
            total = t.one(L.Constant(0.0, axes, dtype=None if fmt == float32 else fmt))
        grads.append(total)
    graph = t.b.finish([*outputs, *grads], "the gradient model")
    return GradModel(graph, len(outputs), tuple(keys), as_tuple=wrt == "inputs")


def _reverse(
    t: Tape, steps: Sequence[_Step], ct: dict[int, list[int]], blocked: Iterable[int] = ()
) -> None:
    """Call the backward of ``steps`` in reverse, each on the sum of its outputs' cotangents in
    ``ct``, adding the cotangents of their inputs there (none for a value in ``blocked``)."""
    stop = set(blocked)
    for step in reversed(steps):
        have = [ct.pop(o, []) for o in step.outputs]
        if not any(have):
            continue
        t.b.scope = _twin(t, step.scope)
        t.path = step.path
        out_cts = [t.total(p, t.axes(o)) if p else None for p, o in zip(have, step.outputs)]
        need = [x in t.active and t.is_float(x) and x not in stop for x in step.inputs]
        in_cts = step.backward(t, out_cts, need)
        for x, c, n in zip(step.inputs, in_cts, need, strict=False):
            if c is not None and n:
                ct.setdefault(x, []).append(c)


def _twin(t: Tape, builder_scope: int) -> int:
    """The backward twin of a builder scope holding forward nodes."""
    if len(t._fwd_inverse) != len(t._fwd_scope):
        t._fwd_inverse = {b: s for s, b in t._fwd_scope.items()}
    return t._scope(t._fwd_inverse.get(builder_scope, 0), t._bwd_scope, True)


def _keys(g: Graph, params: Mapping[str, Any], wrt: Any) -> tuple[list[str | int], list[int]]:
    if isinstance(wrt, str):
        if wrt == "params":
            learned = [k for k, p in params.items() if not p.buffer]
            if not learned:
                raise GradError(
                    "ncd.grad: the model has no learned parameters"
                    + (f" (only the buffers {', '.join(params)})" if params else "")
                    + ". Fix: ask wrt='inputs' instead."
                )
            return list(learned), []
        if wrt == "inputs":
            chosen: list[str | int] = list(range(len(g.inputs)))
        else:
            raise GradError(
                f"ncd.grad: wrt must be 'params', 'inputs' or a list of parameter names and "
                f"input positions, got {show(wrt)}. Fix: pass wrt='params'."
            )
    elif isinstance(wrt, Sequence):
        chosen = list(wrt)
    else:
        raise GradError(
            f"ncd.grad: wrt must be 'params', 'inputs' or a list, got {show(wrt)}. Fix: pass "
            "wrt='params'."
        )
    inputs: list[int] = []
    for k in chosen:
        if isinstance(k, bool) or not isinstance(k, str | int):
            raise GradError(f"ncd.grad: wrt entry {show(k)} is no parameter name or input index.")
        if isinstance(k, str):
            if k not in params:
                raise GradError(
                    f"ncd.grad: no parameter {k!r}; this model has "
                    f"{', '.join(list(params)[:8]) or 'none'}. Fix: pass names from "
                    "ncd.init(model)."
                )
            if params[k].buffer:
                raise GradError(
                    f"ncd.grad: {k!r} is a buffer (state read by the model, such as a batch "
                    "norm's running statistics), not a learned parameter, so it has no gradient. "
                    "Fix: leave it out of wrt."
                )
            continue
        if not 0 <= k < len(g.inputs):
            raise GradError(f"ncd.grad: no input {k}; the model has {len(g.inputs)} input(s).")
        t = g.values[g.inputs[k]]
        if not t.is_float:
            raise IntegerGradError(
                f"ncd.grad: input {k} has dtype {t.dtype} ({_describe(t)}), an integer wire, which "
                "has no gradient. Fix: ask for parameters (wrt='params') or float inputs only "
                "(wrt=[...] of their positions)."
            )
        inputs.append(k)
    return chosen, inputs


def _describe(t: ArrayType) -> str:
    return "axes " + " ".join(a.name for a in t.axes) if t.axes else "a scalar"
