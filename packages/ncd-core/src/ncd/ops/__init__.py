"""Constructors of primitive ops as terms: ``ops.einsum("q d, x d -> q x")`` and friends.

Axes are written by name in strings (fresh template axes, bound when composed) or passed as
``Axis`` objects (exactly those axes). Keyword arguments give a name an ``Axis`` or a size:
``ops.einsum("q d, x d -> q x", d=d_head)``, ``ops.rearrange("(h e) -> h e", h=4)``.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

from ncd._term import Prim, Term, call_site
from ncd.axis import Axis, AxisLike, show
from ncd.errors import DefinitionError
from ncd.op import OP_KINDS, Op, Param, Product, register_op
from ncd.ops import _norms, _shape
from ncd.ops._reductions import (
    all_true,
    any_true,
    argmax,
    argmin,
    cumprod,
    cumsum,
    logsumexp,
    max_with_indices,
    min_with_indices,
    std,
    var,
)
from ncd.primitives.batchnorm import BatchNorm
from ncd.primitives.indexing import Arange, Concat, Gather, Rotary, Slice, Where
from ncd.primitives.library import (
    ACTIVATION_FNS,
    BINARY_FNS,
    REDUCE_FNS,
    UNARY_FNS,
    Activation,
    Binary,
    Cast,
    CausalMask,
    Constant,
    Dropout,
    Einsum,
    Embedding,
    L2Norm,
    LayerNorm,
    Learned,
    Linear,
    Reduce,
    RMSNorm,
    Scalar,
    Scale,
    Softmax,
    Unary,
    View,
)
from ncd.primitives.random import Random
from ncd.primitives.window import Window

__all__ = [
    "ACTIVATION_FNS",
    "Activation",
    "Arange",
    "BINARY_FNS",
    "BatchNorm",
    "Binary",
    "Cast",
    "CausalMask",
    "Concat",
    "Constant",
    "Dropout",
    "Einsum",
    "Embedding",
    "Gather",
    "L2Norm",
    "LayerNorm",
    "Learned",
    "Linear",
    "OP_KINDS",
    "Op",
    "Param",
    "Product",
    "REDUCE_FNS",
    "RMSNorm",
    "Random",
    "Reduce",
    "Rotary",
    "Scalar",
    "Scale",
    "Slice",
    "Softmax",
    "UNARY_FNS",
    "Unary",
    "View",
    "Where",
    "Window",
    "abs",
    "acos",
    "acosh",
    "add",
    "arange",
    "all_true",
    "any_true",
    "argmax",
    "argmin",
    "asin",
    "asinh",
    "atan",
    "atanh",
    "batch_norm",
    "bernoulli",
    "binary",
    "cast",
    "causal_mask",
    "ceil",
    "celu",
    "clamp",
    "concat",
    "constant",
    "cos",
    "cosh",
    "cumprod",
    "cumsum",
    "div",
    "dropout",
    "einsum",
    "elu",
    "embedding",
    "eq",
    "erf",
    "exp",
    "expm1",
    "flip",
    "floor",
    "floordiv",
    "gather",
    "ge",
    "gelu",
    "gelu_tanh",
    "gt",
    "hardsigmoid",
    "hardswish",
    "hardtanh",
    "l2norm",
    "layernorm",
    "le",
    "leaky_relu",
    "learned",
    "linear",
    "log",
    "log1p",
    "logical_and",
    "logical_not",
    "logical_or",
    "logical_xor",
    "logsigmoid",
    "logsumexp",
    "lt",
    "max",
    "max_with_indices",
    "maximum",
    "mean",
    "min",
    "min_with_indices",
    "minimum",
    "mish",
    "mod",
    "mul",
    "ne",
    "neg",
    "normal",
    "pad",
    "pow",
    "prim",
    "prod",
    "rearrange",
    "recip",
    "reduce",
    "register_op",
    "relu",
    "relu6",
    "rename",
    "repeat_interleave",
    "rmsnorm",
    "roll",
    "rotary",
    "round",
    "rsqrt",
    "scalar",
    "scale",
    "selu",
    "sigmoid",
    "sign",
    "silu",
    "sin",
    "sinh",
    "slice",
    "softmax",
    "softplus",
    "softsign",
    "sqrt",
    "square",
    "stack",
    "std",
    "stop_gradient",
    "sub",
    "sum",
    "tan",
    "tanh",
    "tile",
    "trunc",
    "unary",
    "uniform",
    "var",
    "where",
    "window",
]


class _Names:
    """Resolves names to axes within one constructor call (same name -> same axis)."""

    def __init__(self, given: dict[str, AxisLike | int]) -> None:
        self.map: dict[str, Axis] = {}
        for k, v in given.items():
            if isinstance(v, Axis):
                self.map[k] = v
            elif isinstance(v, int) and not isinstance(v, bool):
                self.map[k] = Axis(k, size=v)
            else:
                raise DefinitionError(
                    f"axis {k!r} must be given an Axis or an int size, got {v!r}. Fix: pass "
                    f"{k}=ncd.Axis(...) or {k}=<size>."
                )

    def axis(self, a: AxisLike) -> Axis:
        if isinstance(a, Axis):
            return a
        if not isinstance(a, str):
            raise DefinitionError(
                f"expected an axis name or an Axis, got {show(a)}. Fix: pass a "
                "name such as 'd' or an ncd.Axis."
            )
        if a not in self.map:
            self.map[a] = Axis(a)
        return self.map[a]

    def axes(self, spec: AxisLike | Sequence[AxisLike]) -> tuple[Axis, ...]:
        if isinstance(spec, Axis):
            return (spec,)
        if isinstance(spec, str):
            return tuple(self.axis(n) for n in spec.split())
        if not isinstance(spec, Sequence):
            raise DefinitionError(
                f"expected axis names or Axis objects, got {show(spec)}. Fix: "
                "pass 'q d', an Axis, or a sequence of them."
            )
        return tuple(self.axis(a) for a in spec)


def _arrow(what: str, spec: object, example: str) -> tuple[str, str]:
    """Split ``"in -> out"``; anything else is a ``DefinitionError`` showing ``example``."""
    if not isinstance(spec, str) or spec.count("->") != 1:
        raise DefinitionError(
            f"{what} spec {show(spec)} needs exactly one '->' between inputs and output. Fix: "
            f"write it like {example!r}."
        )
    left, right = spec.split("->")
    return left, right


def prim(op: Op) -> Term:
    """Wrap any op (including a plugin's) as a term."""
    if not isinstance(op, Op):
        raise DefinitionError(
            f"ops.prim takes an Op, got {show(op)}. Fix: pass an instance of an "
            "op class (e.g. ops.Softmax(axis))."
        )
    return Prim(op, call_site())


def einsum(spec: str, *, name: str = "", **axes: AxisLike | int) -> Term:
    """A contraction/outer product/transpose: ``"q d, x d -> q x"``."""
    lhs, rhs = _arrow("einsum", spec, "q d, x d -> q x")
    if "," in rhs:
        raise DefinitionError(
            f"einsum spec {spec!r} has several outputs. Fix: one einsum per output, e.g. "
            "'q d, x d -> q x'."
        )
    n = _Names(axes)
    inputs = tuple(n.axes(part) for part in lhs.split(","))
    return prim(Einsum(inputs, n.axes(rhs), name=name))


def linear(
    spec: str | Sequence[AxisLike] | AxisLike,
    out: Sequence[AxisLike] | AxisLike | None = None,
    *,
    bias: bool = True,
    name: str = "linear",
    **axes: AxisLike | int,
) -> Term:
    """A learned map: ``linear("d_model -> heads d_head")`` or ``linear(d_in, d_out)``."""
    n = _Names(axes)
    if out is None:
        left, right = _arrow("linear", spec, "d_model -> heads d_head")
        return prim(Linear(n.axes(left), n.axes(right), bias, name=name))
    return prim(Linear(n.axes(spec), n.axes(out), bias, name=name))


def unary(fn: str, *, name: str = "") -> Term:
    return prim(Unary(fn, name=name))


def binary(fn: str, *, name: str = "") -> Term:
    return prim(Binary(fn, name=name))


def scalar(fn: str, const: float, *, reverse: bool = False, name: str = "") -> Term:
    return prim(Scalar(fn, const, reverse, name=name))


def _bin(fn: str, const: float | None, reverse: bool, name: str) -> Term:
    return binary(fn, name=name) if const is None else scalar(fn, const, reverse=reverse, name=name)


def add(const: float | None = None, *, reverse: bool = False, name: str = "") -> Term:
    """``x + y``, or ``x + const`` when a constant is given."""
    return _bin("add", const, reverse, name)


def sub(const: float | None = None, *, reverse: bool = False, name: str = "") -> Term:
    """``x - y``, ``x - const``, or ``const - x`` with ``reverse=True``."""
    return _bin("sub", const, reverse, name)


def mul(const: float | None = None, *, reverse: bool = False, name: str = "") -> Term:
    return _bin("mul", const, reverse, name)


def div(const: float | None = None, *, reverse: bool = False, name: str = "") -> Term:
    return _bin("div", const, reverse, name)


def pow(const: float | None = None, *, reverse: bool = False, name: str = "") -> Term:
    return _bin("pow", const, reverse, name)


def floordiv(const: float | None = None, *, reverse: bool = False, name: str = "") -> Term:
    """``floor(x / y)`` (torch's ``floor_divide``, Python's ``//``): integers stay integers
    (a division by 0 gives 0, where torch raises); floats follow NumPy (``x / 0`` at 0)."""
    return _bin("floordiv", const, reverse, name)


def mod(const: float | None = None, *, reverse: bool = False, name: str = "") -> Term:
    """``x - y floor(x / y)``, with the divisor's sign (torch's ``remainder``, Python's
    ``%``): integers stay integers (``% 0`` gives 0, where torch raises); a float ``% 0`` is
    NaN."""
    return _bin("mod", const, reverse, name)


def maximum(const: float | None = None, *, name: str = "") -> Term:
    """Elementwise maximum of two inputs (or with a constant)."""
    return _bin("max", const, False, name)


def minimum(const: float | None = None, *, name: str = "") -> Term:
    return _bin("min", const, False, name)


def _comparison_ctor(fn: str, sign: str) -> Callable[..., Term]:
    def make(const: float | None = None, *, reverse: bool = False, name: str = "") -> Term:
        return _bin(fn, const, reverse, name)

    make.__name__ = fn
    make.__doc__ = (
        f"``x {sign} y`` (or ``x {sign} const``; ``const {sign} x`` with ``reverse=True``) as a "
        "``bool`` wire, torch's ``" + fn + "``: IEEE, so a comparison with NaN is false (but "
        "``ne``'s). A bool feeds arithmetic as 0.0 / 1.0, ``ops.where`` as its condition."
    )
    return make


lt = _comparison_ctor("lt", "<")
le = _comparison_ctor("le", "<=")
gt = _comparison_ctor("gt", ">")
ge = _comparison_ctor("ge", ">=")
eq = _comparison_ctor("eq", "==")
ne = _comparison_ctor("ne", "!=")


def logical_not(*, name: str = "") -> Term:
    """``x == 0`` as a ``bool`` wire (torch's ``logical_not``: a nonzero value, NaN included,
    is true)."""
    return scalar("eq", 0.0, name=name)


def _logical(combine: Term, name: str) -> Term:
    truth = scalar("ne", 0.0) @ scalar("ne", 0.0)
    return truth >> combine >> scalar("ne", 0.0, name=name)


def logical_and(*, name: str = "") -> Term:
    """Both inputs nonzero, a ``bool`` wire (torch's ``logical_and``; NaN is true)."""
    return _logical(binary("mul"), name)


def logical_or(*, name: str = "") -> Term:
    """Either input nonzero, a ``bool`` wire (torch's ``logical_or``; NaN is true)."""
    return _logical(binary("max"), name)


def logical_xor(*, name: str = "") -> Term:
    """Exactly one input nonzero, a ``bool`` wire (torch's ``logical_xor``; NaN is true)."""
    return (scalar("ne", 0.0) @ scalar("ne", 0.0)) >> binary("ne", name=name)


def _unary_ctor(fn: str) -> Callable[..., Term]:
    def make(*, name: str = "") -> Term:
        return unary(fn, name=name)

    make.__name__ = fn
    make.__doc__ = f"Elementwise ``{fn}``."
    return make


exp = _unary_ctor("exp")
log = _unary_ctor("log")
sqrt = _unary_ctor("sqrt")
rsqrt = _unary_ctor("rsqrt")
abs = _unary_ctor("abs")
neg = _unary_ctor("neg")
relu = _unary_ctor("relu")
silu = _unary_ctor("silu")
sigmoid = _unary_ctor("sigmoid")
tanh = _unary_ctor("tanh")
square = _unary_ctor("square")
recip = _unary_ctor("recip")
gelu_tanh = _unary_ctor("gelu_tanh")
cos = _unary_ctor("cos")
sin = _unary_ctor("sin")
atan = _unary_ctor("atan")
asinh = _unary_ctor("asinh")
erf = _unary_ctor("erf")
floor = _unary_ctor("floor")
ceil = _unary_ctor("ceil")
round = _unary_ctor("round")  # half to even, as torch.round and NumPy
trunc = _unary_ctor("trunc")
sign = _unary_ctor("sign")
tan = _unary_ctor("tan")
asin = _unary_ctor("asin")
acos = _unary_ctor("acos")
sinh = _unary_ctor("sinh")
cosh = _unary_ctor("cosh")
atanh = _unary_ctor("atanh")
acosh = _unary_ctor("acosh")
expm1 = _unary_ctor("expm1")
log1p = _unary_ctor("log1p")
selu = _unary_ctor("selu")
mish = _unary_ctor("mish")
hardswish = _unary_ctor("hardswish")
hardsigmoid = _unary_ctor("hardsigmoid")
softsign = _unary_ctor("softsign")
logsigmoid = _unary_ctor("logsigmoid")
relu6 = _unary_ctor("relu6")
#: the value as it is, with no gradient through it (``x.detach()``, ``jax.lax.stop_gradient``)
stop_gradient = _unary_ctor("stop_gradient")


def leaky_relu(negative_slope: float = 0.01, *, name: str = "") -> Term:
    """``x`` where ``x >= 0``, else ``negative_slope * x`` (torch's ``F.leaky_relu``)."""
    return prim(Activation("leaky_relu", negative_slope, name=name))


def elu(alpha: float = 1.0, *, name: str = "") -> Term:
    """``x`` where ``x > 0``, else ``alpha * (exp(x) - 1)`` (torch's ``F.elu``)."""
    return prim(Activation("elu", alpha, name=name))


def celu(alpha: float = 1.0, *, name: str = "") -> Term:
    """``max(0, x) + min(0, alpha * (exp(x / alpha) - 1))`` (torch's ``F.celu``)."""
    return prim(Activation("celu", alpha, name=name))


def softplus(beta: float = 1.0, threshold: float = 20.0, *, name: str = "") -> Term:
    """``log(1 + exp(beta x)) / beta``, ``x`` itself where ``beta x > threshold`` (torch's
    ``F.softplus``)."""
    return prim(Activation("softplus", beta, threshold, name=name))


def clamp(min: float | None = None, max: float | None = None, *, name: str = "") -> Term:
    """``x`` limited to ``[min, max]`` (either bound may be left out; a NaN stays NaN, as in
    torch): a maximum with ``min`` then a minimum with ``max``."""
    if min is None and max is None:
        raise DefinitionError(
            "clamp: give min, max or both. Fix: ops.clamp(min=0.0) or ops.clamp(-1.0, 1.0)."
        )
    if min is not None and max is not None and not min <= max:
        raise DefinitionError(
            f"clamp: min {show(min)} is above max {show(max)}. Fix: pass min <= max (torch "
            "would give max everywhere)."
        )
    low = None if min is None else scalar("max", min, name=f"{name}_min" if name else "")
    high = None if max is None else scalar("min", max, name=f"{name}_max" if name else "")
    if low is None:
        assert high is not None
        return high
    return low if high is None else low >> high


def hardtanh(min_val: float = -1.0, max_val: float = 1.0, *, name: str = "") -> Term:
    """torch's ``F.hardtanh``: ``ops.clamp(min_val, max_val)``."""
    return clamp(min_val, max_val, name=name)


def gelu(*, approximate: str = "none", name: str = "") -> Term:
    """GELU: exact (erf) by default, ``approximate="tanh"`` for the GPT-2 form."""
    if approximate not in ("none", "tanh"):
        raise DefinitionError(
            f"gelu: approximate must be 'none' or 'tanh', got "
            f"{show(approximate)}. Fix: pass approximate='tanh' for the GPT-2 "
            "form."
        )
    return unary("gelu" if approximate == "none" else "gelu_tanh", name=name)


def reduce(fn: str, over: AxisLike | Sequence[AxisLike], *, name: str = "") -> Term:
    return prim(Reduce(fn, _Names({}).axes(over), name=name))


def sum(over: AxisLike | Sequence[AxisLike], *, name: str = "") -> Term:
    """Sum over the given axes."""
    return reduce("sum", over, name=name)


def max(over: AxisLike | Sequence[AxisLike], *, name: str = "") -> Term:
    return reduce("max", over, name=name)


def min(over: AxisLike | Sequence[AxisLike], *, name: str = "") -> Term:
    return reduce("min", over, name=name)


def mean(over: AxisLike | Sequence[AxisLike], *, name: str = "") -> Term:
    return reduce("mean", over, name=name)


def prod(over: AxisLike | Sequence[AxisLike], *, name: str = "") -> Term:
    """The product over the given axes (1 over no elements; NaN and inf as IEEE products)."""
    return reduce("prod", over, name=name)


def scale(by: AxisLike | Sequence[AxisLike], power: float = -0.5, *, name: str = "") -> Term:
    """Multiply by ``prod(|by|) ** power``: ``scale(d)`` is attention's ``1/sqrt(d)``."""
    return prim(Scale(_Names({}).axes(by), power, name=name))


def softmax(axis: AxisLike, *, name: str = "") -> Term:
    """Softmax over one axis (lifted over the rest)."""
    return prim(Softmax(_Names({}).axis(axis), name=name))


def l2norm(axis: AxisLike, *, eps: float = 1e-12, name: str = "") -> Term:
    """``x / sqrt(sum x^2 + eps)`` over one axis: the spherical normaliser."""
    return prim(L2Norm(_Names({}).axis(axis), eps, name=name))


def layernorm(
    axes: AxisLike | Sequence[AxisLike],
    *,
    eps: float = 1e-5,
    affine: bool = True,
    bias: bool = True,
    name: str = "",
) -> Term:
    return prim(LayerNorm(_Names({}).axes(axes), eps, affine, bias, name=name))


def rmsnorm(
    axes: AxisLike | Sequence[AxisLike], *, eps: float = 1e-6, affine: bool = True, name: str = ""
) -> Term:
    return prim(RMSNorm(_Names({}).axes(axes), eps, affine, name=name))


def causal_mask(
    q: AxisLike = "q", x: AxisLike = "x", *, fill: str = "-inf", name: str = ""
) -> Term:
    """Mask scores ``[q, x]`` so query ``i`` sees keys ``j <= i`` (aligned at the end).

    Masked scores become ``-inf`` (for softmax) or ``0`` (``fill="0"``, for the L2 normaliser).
    """
    n = _Names({})
    return prim(CausalMask(n.axis(q), n.axis(x), fill, name=name))


def embedding(
    spec: str | AxisLike,
    out: Sequence[AxisLike] | AxisLike | None = None,
    *,
    name: str = "embedding",
    **axes: AxisLike | int,
) -> Term:
    """Integer ids to learned vectors: ``embedding("vocab -> d_model")``."""
    n = _Names(axes)
    if out is None:
        left, right = _arrow("embedding", spec, "vocab -> d_model")
        table = n.axes(left)
        if len(table) != 1:
            raise DefinitionError(
                f"embedding spec {spec!r} needs one table axis before '->', got "
                f"{len(table)}. Fix: write it like 'vocab -> d_model'."
            )
        return prim(Embedding(table[0], n.axes(right), name=name))
    return prim(Embedding(n.axis(spec), n.axes(out), name=name))


def cast(to: object, *, source: object = None, name: str = "") -> Term:
    """Convert one value to the format ``to`` (``ncd.bfloat16``, ``"float32"``, ``np.float16``),
    elementwise, as torch's ``.to(dtype)``; the only place two formats meet. Floats round to
    nearest even; integers and bools become floats or wider integers; a float becomes an
    integer truncated toward zero, saturating at the range, NaN giving 0; anything becomes a
    bool as ``x != 0``; narrowing integer casts are refused (they would wrap around). ``source``
    is the format read when the cast is a model's first op (float32 by default)."""
    return prim(Cast(to, dtype=source, name=name))


def dropout(p: float = 0.1, *, seed: int | None = None, name: str = "") -> Term:
    """Identity at inference; seeded random zeroing (scaled by 1/(1-p)) in training mode.
    ``seed``: always on, the mask a counter-based hash of the seed and each element's position
    (``ncd.counter_rng``): the reference, every kernel and the torch export draw the same."""
    return prim(Dropout(p, seed, name=name))


def constant(value: float, axes: AxisLike | Sequence[AxisLike] = (), *, name: str = "") -> Term:
    """A constant array (a scalar by default) filled with ``value``."""
    return prim(Constant(value, _Names({}).axes(axes), name=name))


def learned(
    axes: AxisLike | Sequence[AxisLike], *, init: str = "normal", name: str = "weight"
) -> Term:
    """A learned array over ``axes`` (positional embeddings, standalone biases)."""
    return prim(Learned(_Names({}).axes(axes), init, name=name))


def _parse_groups(spec: str, side: str, n: _Names) -> list[tuple[Axis | None, tuple[Axis, ...]]]:
    groups: list[tuple[Axis | None, tuple[Axis, ...]]] = []
    tokens = side.replace("(", " ( ").replace(")", " ) ").split()

    def bad(what: str) -> DefinitionError:
        return DefinitionError(
            f"rearrange {spec!r}: {what} in {side.strip()!r}. Fix: groups are flat and closed, "
            "like 's (h e) -> s h e'."
        )

    i = 0
    while i < len(tokens):
        if tokens[i] == "(":
            if ")" not in tokens[i:]:
                raise bad("unbalanced '('")
            j = tokens.index(")", i)
            inner = tokens[i + 1 : j]
            if "(" in inner:
                raise bad("nested '('")
            if not inner:
                raise bad("an empty group '()'")
            groups.append((None, tuple(n.axis(t) for t in inner)))
            i = j + 1
        elif tokens[i] == ")":
            raise bad("unbalanced ')'")
        else:
            a = n.axis(tokens[i])
            groups.append((a, (a,)))
            i += 1
    return groups


def rearrange(spec: str, *, name: str = "", **axes: AxisLike | int) -> Term:
    """Permute, split and merge axes, einops style: ``"s (h e) -> s h e"`` with ``h=4``.

    A parenthesised group stands for one axis made of its parts; one part of each split may be
    left unsized (it is derived). Merged output axes are named by joining their parts with ``_``.
    """
    left, right = _arrow("rearrange", spec, "s (h e) -> s h e")
    n = _Names(axes)
    ins = _parse_groups(spec, left, n)
    outs = _parse_groups(spec, right, n)
    derived: list[Axis] = []

    def whole(groups: list[tuple[Axis | None, tuple[Axis, ...]]], side: str) -> list[Axis]:
        res = []
        for axis, parts in groups:
            if axis is None:
                axis = Axis("_".join(p.name for p in parts))
                if side == "out":
                    derived.append(axis)
                else:
                    unsized = [p for p in parts if p.size is None]
                    if len(unsized) > 1:
                        raise DefinitionError(
                            f"rearrange {spec!r}: split ({' '.join(p.name for p in parts)}) needs "
                            f"sizes for all but one part. Fix: give e.g. {unsized[0].name}=<size>."
                        )
                    derived.extend(unsized)
            res.append(axis)
        return res

    in_axes = whole(ins, "in")
    out_axes = whole(outs, "out")
    return prim(
        View(
            tuple(in_axes),
            tuple(out_axes),
            tuple(p for _, p in ins),
            tuple(p for _, p in outs),
            tuple(derived),
            name=name,
        )
    )


def rename(src: AxisLike, dst: AxisLike, *, name: str = "") -> Term:
    """A new axis ``dst`` of the same size standing for ``src`` (e.g. attention's key axis)."""
    n = _Names({})
    a, b = n.axis(src), n.axis(dst)
    return prim(View((a,), (b,), ((a,),), ((a,),), (), name=name))


def where(*, name: str = "") -> Term:
    """``cond ? x : y`` elementwise, fed ``(cond, x, y)``: ``x`` where ``cond`` is true (a
    bool, or nonzero), else ``y``, broadcast over the union of their axes."""
    return prim(Where(name=name))


def gather(axis: AxisLike, *, name: str = "") -> Term:
    """A value read along ``axis`` at integer ids, fed ``(ids, table)``: ``table[.., ids, ..]``
    (``index_select``, an embedding of a value, ``take_along_axis`` when the two share axes).
    The result has the ids' axes, then the table's others."""
    return prim(Gather(_Names({}).axis(axis), name=name))


def arange(
    axis: AxisLike, *, start: float = 0.0, step: float = 1.0, name: str = "", **axes: AxisLike | int
) -> Term:
    """The index along ``axis`` as a float value, ``start + step * i`` (a source: no inputs)."""
    return prim(Arange(_Names(axes).axis(axis), float(start), float(step), name=name))


def slice(
    src: AxisLike,
    dst: AxisLike,
    *,
    start: int = 0,
    from_end: bool = False,
    name: str = "",
    **axes: AxisLike | int,
) -> Term:
    """``x[start : start + |dst|]`` along ``src``, as the new axis ``dst``:
    ``ops.slice("d", "half", start=16, half=16)``; ``from_end``: ``start`` counts from the
    end, ``x[n - start - |dst| : n - start]`` (the last position: ``ops.slice("seq", "last",
    from_end=True, last=1)``), the same elements whatever the length."""
    n = _Names(axes)
    return prim(Slice(n.axis(src), n.axis(dst), start, from_end, name=name))


def concat(spec: str, *, name: str = "", **axes: AxisLike | int) -> Term:
    """Join the inputs end to end along one axis: ``ops.concat("a, b -> c")`` reads one input
    indexed by ``a`` and one by ``b`` and writes ``c`` (|c| = |a| + |b|)."""
    left, right = _arrow("concat", spec, "a, b -> c")
    n = _Names(axes)
    ins = [n.axes(part) for part in left.split(",")]
    out = n.axes(right)
    if any(len(g) != 1 for g in ins) or len(out) != 1:
        raise DefinitionError(
            f"concat spec {spec!r} needs one axis per input and one result axis. Fix: write "
            "it like 'a, b -> c'."
        )
    return prim(Concat(tuple(g[0] for g in ins), out[0], name=name))


def rotary(
    seq: AxisLike = "seq",
    d: AxisLike = "d_head",
    *,
    base: float = 10000.0,
    freqs: Sequence[float] = (),
    scale: float = 1.0,
    name: str = "",
) -> Term:
    """Rotary position embedding over ``[seq d]`` (Llama's rotate-half layout): feature ``j``
    and ``j + |d|/2`` of position ``t`` turn by ``t * base ** (-2j/|d|)``, or by ``t *
    freqs[j]`` given a scaled RoPE's table (Llama 3's, YaRN's ``inv_freq``: ``|d|/2``
    frequencies); ``scale`` multiplies cos and sin (YaRN's attention factor)."""
    n = _Names({})
    return prim(Rotary(n.axis(seq), n.axis(d), base, freqs=tuple(freqs), scale=scale, name=name))


def window(
    axis: AxisLike,
    out: AxisLike,
    k: AxisLike,
    /,
    *,
    stride: int = 1,
    padding: int = 0,
    dilation: int = 1,
    fill: float = 0.0,
    upsample: int = 1,
    extra: int = 0,
    reverse: bool = False,
    name: str = "",
    **axes: AxisLike | int,
) -> Term:
    """Sliding windows along ``axis``: the new axes ``out`` (positions) and ``k`` (offsets),
    ``y[o, j] = x[o*stride + j*dilation - padding]`` (``fill`` off the ends), ``|out|``
    derived as in torch: ``ops.window("l", "l_out", "k", k=3, padding=1)``. ``upsample``
    spreads the input's elements that far apart (``fill`` between), ``extra`` pads the end
    further and ``reverse`` reads the offsets backwards: a transposed convolution's window."""
    n = _Names(axes)
    a, o, j = n.axis(axis), n.axis(out), n.axis(k)
    return prim(
        Window(a, o, j, stride, padding, dilation, fill, upsample, extra, reverse, name=name)
    )


def pad(
    axis: AxisLike,
    out: AxisLike,
    *,
    before: int = 0,
    after: int = 0,
    value: float = 0.0,
    mode: str = "constant",
    name: str = "",
    **axes: AxisLike | int,
) -> Term:
    """``x`` along ``axis`` with ``before`` and ``after`` elements at its ends, as the new axis
    ``out`` (``|out| = |axis| + before + after``), torch's ``F.pad`` of one dim:
    ``ops.pad("l", "l_pad", before=1, after=2)``. ``mode`` "constant" pads with ``value`` (a
    number or +-inf): a window of one offset read in place (no copy before its reader), the
    offset summed away. "reflect" mirrors around the end elements (at most ``|axis| - 1``),
    "replicate" repeats them, "circular" wraps around (at most ``|axis|``): slices joined by a
    concat, the axis sized (``l=7``)."""
    for what, v in (("before", before), ("after", after)):
        if isinstance(v, bool) or not isinstance(v, int) or v < 0:
            raise DefinitionError(
                f"pad: {what} must be a count of elements >= 0, got {show(v)}. Fix: pass an "
                "int; cut elements off with ops.slice."
            )
    if mode not in _shape.PAD_MODES:
        raise DefinitionError(
            f"pad: unknown mode {show(mode)}. Fix: pass one of {', '.join(_shape.PAD_MODES)}."
        )
    n = _Names(axes)
    a, o = n.axis(axis), n.axis(out)
    if mode != "constant":
        if value != 0.0:
            raise DefinitionError(
                f"pad: mode {mode!r} takes its values from the input, not value={show(value)}. "
                "Fix: leave value out, or pad with mode='constant'."
            )
        return _shape.edge_pad(a, o, before, after, mode, name)
    tap = Axis(f"{a.name}_pad_tap", size=1)
    spread = prim(Window(a, o, tap, 1, before, 1, value, 1, after - before, False, name=name))
    return spread >> reduce("sum", tap, name=f"{name}_tap" if name else "")


def flip(axis: AxisLike, *, name: str = "", **axes: AxisLike | int) -> Term:
    """The elements of ``axis`` in reverse order, on the same axis (torch's ``flip`` of one
    dim; flip several dims one after another): ``ops.flip("l", l=7)``. The axis needs a size."""
    return _shape.flip(_Names(axes).axis(axis), name)


def roll(axis: AxisLike, shift: int, *, name: str = "", **axes: AxisLike | int) -> Term:
    """``y[i] = x[(i - shift) mod |axis|]`` on the same axis (torch's ``roll`` of one dim): the
    last ``shift`` elements move to the front (a negative shift: the first to the back).
    ``ops.roll("l", 2, l=7)``; the axis needs a size."""
    return _shape.roll(_Names(axes).axis(axis), shift, name)


def tile(
    axis: AxisLike, out: AxisLike, repeats: int, *, name: str = "", **axes: AxisLike | int
) -> Term:
    """``axis`` repeated ``repeats`` times end to end as the new axis ``out``,
    ``y[r |axis| + i] = x[i]`` (torch's ``x.repeat``/``torch.tile`` of one dim): ``ops.tile(
    "d", "d3", 3)``. A broadcast over a new axis merged with ``axis``: any size."""
    n = _Names(axes)
    return _shape.tile(n.axis(axis), n.axis(out), repeats, name)


def repeat_interleave(
    axis: AxisLike, out: AxisLike, repeats: int, *, name: str = "", **axes: AxisLike | int
) -> Term:
    """Each element of ``axis`` repeated ``repeats`` times in place as the new axis ``out``,
    ``y[i r + j] = x[i]`` (torch's ``repeat_interleave`` by an int): any size."""
    n = _Names(axes)
    return _shape.repeat_interleave(n.axis(axis), n.axis(out), repeats, name)


def stack(axis: AxisLike, n: int, *, name: str = "") -> Term:
    """``n`` inputs joined along the new axis ``axis`` of size ``n`` (torch's ``stack``), each
    broadcast over the others' axes; ``vstack``/``hstack``/``cat`` join along an axis the
    inputs have: ``ops.concat``."""
    return _shape.stack(_Names({}).axis(axis), n, name)


def batch_norm(
    axis: AxisLike = "c",
    *,
    eps: float = 1e-5,
    affine: bool = True,
    name: str = "bn",
    over: AxisLike | Sequence[AxisLike] | None = None,
    momentum: float = 0.1,
    running: bool = False,
    **sizes: AxisLike | int,
) -> Term:
    """Batch norm over the channel axis, parameters named as PyTorch's ``BatchNorm1d/2d/3d``.

    Eval form (``over`` not given): ``(x - running_mean) / sqrt(running_var + eps) * weight +
    bias``, elementwise, so it fuses into the kernel before it. Training form (``over``: the
    batch and spatial axes, e.g. ``over="batch h w"``): each channel normalised by the mean and
    biased variance over ``over``, then ``weight`` and ``bias``, as torch's ``train()`` mode;
    ``running=True`` adds two outputs, the running statistics moved by ``momentum`` towards the
    batch's (``(1 - momentum) * running_mean + momentum * mean``, the variance unbiased), for
    the training loop to store. The running statistics are buffers: ``ncd.grad`` gives them no
    gradient."""
    names = _Names(sizes)
    channels = names.axis(axis)
    if over is None:
        return prim(BatchNorm(channels, eps, affine, name=name))
    return _norms.batch_norm_train(
        channels,
        names.axes(over),
        eps=eps,
        affine=affine,
        momentum=momentum,
        running=running,
        name=name,
    )


def _draw(
    dist: str,
    axes: AxisLike | Sequence[AxisLike],
    a: float,
    b: float,
    seed: int,
    name: str,
    sized: dict[str, AxisLike | int],
) -> Term:
    return prim(Random(_Names(sized).axes(axes), dist, seed, float(a), float(b), name=name))


def uniform(
    axes: AxisLike | Sequence[AxisLike],
    low: float = 0.0,
    high: float = 1.0,
    *,
    seed: int = 0,
    name: str = "",
    **sizes: AxisLike | int,
) -> Term:
    """Uniform draws in ``(low, high)`` over ``axes``, the same in every backend for a seed
    (``ncd.counter_rng``): ``ops.uniform("seq d", seed=3, seq=7, d=13)``."""
    return _draw("uniform", axes, low, high, seed, name, sizes)


def normal(
    axes: AxisLike | Sequence[AxisLike],
    mean: float = 0.0,
    std: float = 1.0,
    *,
    seed: int = 0,
    name: str = "",
    **sizes: AxisLike | int,
) -> Term:
    """Normal draws (Box-Muller on two counter-based uniforms) over ``axes``."""
    return _draw("normal", axes, mean, std, seed, name, sizes)


def bernoulli(
    axes: AxisLike | Sequence[AxisLike],
    p: float = 0.5,
    *,
    seed: int = 0,
    name: str = "",
    **sizes: AxisLike | int,
) -> Term:
    """1.0 with probability ``p``, else 0.0, over ``axes`` (the draws of dropout's mask)."""
    return _draw("bernoulli", axes, p, 0.0, seed, name, sizes)
