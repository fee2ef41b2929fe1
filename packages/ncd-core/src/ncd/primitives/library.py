"""The built-in primitive ops: contractions, learned maps, elementwise maps, reductions,
normalisers, masks, embeddings, dropout, views and constants."""

from __future__ import annotations

import re
from typing import Any, ClassVar

import attrs

from ncd.axis import Axis, show
from ncd.dtypes import DType, bool_
from ncd.dtypes import dtype as to_dtype
from ncd.errors import DefinitionError
from ncd.op import (
    Op,
    Param,
    Product,
    Signature,
    axes_field,
    axis_field,
    choice_field,
    flag_field,
    groups_field,
    number_field,
    register_op,
)

__all__ = [
    "ACTIVATION_FNS",
    "BINARY_FNS",
    "COMPARISONS",
    "REDUCE_FNS",
    "STEP_FNS",
    "UNARY_FNS",
    "Activation",
    "Binary",
    "Cast",
    "CausalMask",
    "Constant",
    "Dropout",
    "Einsum",
    "Embedding",
    "L2Norm",
    "LayerNorm",
    "Learned",
    "Linear",
    "Parameter",
    "RMSNorm",
    "Reduce",
    "Scalar",
    "Scale",
    "Softmax",
    "Unary",
    "View",
]

UNARY_FNS = (
    "exp",
    "log",
    "sqrt",
    "rsqrt",
    "abs",
    "neg",
    "relu",
    "gelu",
    "gelu_tanh",
    "silu",
    "sigmoid",
    "tanh",
    "square",
    "recip",
    "cos",
    "sin",
    "atan",
    "asinh",
    # the rest of the elementwise family (issue 15): rounding, sign, trig/hyperbolic, exp/log
    # forms that keep precision near 0, and the fixed-constant activations
    "erf",
    "floor",
    "ceil",
    "round",
    "trunc",
    "sign",
    "tan",
    "asin",
    "acos",
    "sinh",
    "cosh",
    "atanh",
    "acosh",
    "expm1",
    "log1p",
    "selu",
    "mish",
    "hardswish",
    "hardsigmoid",
    "softsign",
    "logsigmoid",
    "relu6",
    # the identity whose gradient is zero: torch's detach, JAX's stop_gradient
    "stop_gradient",
)
#: SELU's constants (Klambauer et al. 2017), torch's digits
SELU_ALPHA = 1.6732632423543772848170429916717
SELU_SCALE = 1.0507009873554804934193349852946
#: the unary functions whose derivative is zero wherever it exists (steps)
STEP_FNS = ("floor", "ceil", "round", "trunc", "sign")
#: activations with a constant of their own (``Activation.alpha``, ``beta``), torch's defaults:
#: leaky_relu(x; negative_slope=0.01), elu(x; alpha=1), celu(x; alpha=1),
#: softplus(x; beta=1, threshold=20)
ACTIVATION_FNS = ("leaky_relu", "elu", "celu", "softplus")
#: ``floordiv`` is torch's ``floor_divide`` (``floor(a / b)``), ``mod`` its ``remainder``
#: (``a - b floor(a / b)``: the divisor's sign, as Python's ``%``)
BINARY_FNS = (
    "add", "sub", "mul", "div", "max", "min", "pow", "floordiv", "mod",
    "lt", "le", "gt", "ge", "eq", "ne",
)  # fmt: skip
#: the comparisons of ``BINARY_FNS``: a ``bool`` wire, true where ``a op b`` holds (IEEE: any
#: comparison with NaN is false but ``ne``); operands of any kind (an int compares as a float);
#: no gradient
COMPARISONS = {"lt": "<", "le": "<=", "gt": ">", "ge": ">=", "eq": "==", "ne": "!="}
REDUCE_FNS = ("sum", "max", "mean", "min", "prod", "logsumexp")
#: the functions of ``BINARY_FNS`` that keep integers integers, as torch's (a quotient or a
#: power of integers is a float); ``INTEGER_UNARY`` the unary ones
INTEGER_FNS = ("add", "sub", "mul", "max", "min", "floordiv", "mod")
INTEGER_UNARY = ("neg", "abs")


def integer_result(
    fn: str, in_dtypes: tuple[str, ...], fns: tuple[str, ...] | None = None
) -> DType | None:
    """The integer ``fn`` of ``in_dtypes`` gives (``fn`` in ``fns``, or any ``fn`` without
    ``fns``; every input an integer or a bool and one at least an integer): the widest of the
    integers, as torch's; else ``None``."""
    types = [to_dtype(d) for d in in_dtypes]
    ints = [d for d in types if d.kind == "int"]
    if (fns is not None and fn not in fns) or not ints or any(d.kind == "float" for d in types):
        return None
    return max(ints, key=lambda d: d.itemsize)


#: the Fix of an eps out of range
_EPS_FIX = "pass a small non-negative eps such as 1e-5"


@register_op
@attrs.frozen
class Einsum(Op):
    """A contraction, outer product or transpose: ``inputs -> output`` over named axes."""

    kind: ClassVar[str] = "einsum"
    category: ClassVar[str] = "contraction"
    inputs: tuple[tuple[Axis, ...], ...] = groups_field()
    output: tuple[Axis, ...] = axes_field()

    def __attrs_post_init__(self) -> None:
        if not self.inputs:
            raise DefinitionError("einsum needs at least one input. Fix: write 'x d -> d'.")
        every = {a for g in self.inputs for a in g}
        missing = [a.describe() for a in self.output if a not in every]
        if missing:
            raise DefinitionError(
                f"einsum {self.core_text()!r}: output axes {missing} appear in no input. Fix: "
                "sum over input axes only, or broadcast with ops.mul and a constant."
            )
        for k, g in enumerate((*self.inputs, self.output)):
            repeated = sorted({a.name for a in g if g.count(a) > 1})
            if not repeated:
                continue
            which = "the output" if k == len(self.inputs) else f"operand {k}"
            raise DefinitionError(
                f"einsum {self.core_text()!r}: einsum operand repeats an axis: {which} has "
                f"{', '.join(repeated)} more than once (an array has each axis once; diagonals "
                "and traces are not einsum ops here). Fix: "
                "for a product of a value with itself, such as the Gram matrix X X^T, rename "
                "one copy's axis: ops.einsum('s d, t d -> s t') fed x and "
                "ops.rename('s', 't')(x)."
            )

    def signature(self) -> Signature:
        return self.inputs, (self.output,)

    @property
    def contracted(self) -> tuple[Axis, ...]:
        """Axes summed away (in some input, not in the output)."""
        out = set(self.output)
        seen: dict[Axis, None] = {}
        for g in self.inputs:
            for a in g:
                if a not in out:
                    seen.setdefault(a)
        return tuple(seen)


@register_op
@attrs.frozen
class Linear(Op):
    """A learned linear map ``in_axes -> out_axes``; weight axes are ``(*out, *in)``."""

    kind: ClassVar[str] = "linear"
    category: ClassVar[str] = "contraction"
    in_axes: tuple[Axis, ...] = axes_field()
    out_axes: tuple[Axis, ...] = axes_field()
    bias: bool = flag_field(True)

    def signature(self) -> Signature:
        return (self.in_axes,), (self.out_axes,)

    def params(self) -> tuple[Param, ...]:
        w = Param("weight", (*self.out_axes, *self.in_axes), "uniform_fan_in", self.in_axes)
        if not self.bias:
            return (w,)
        return w, Param("bias", self.out_axes, "uniform_fan_in", self.in_axes)


@register_op
@attrs.frozen
class Unary(Op):
    """An elementwise function of one input."""

    kind: ClassVar[str] = "unary"
    category: ClassVar[str] = "elementwise"
    promotes_integers: ClassVar[bool] = True
    fn: str = choice_field(UNARY_FNS)

    def signature(self) -> Signature:
        return ((),), ((),)

    def accepts(self, k: int, dtype: str) -> bool:
        if self.fn in INTEGER_UNARY and to_dtype(dtype).kind == "int":
            return True  # -ids, |offsets|: integers
        return super().accepts(k, dtype)

    def out_dtypes(self, in_dtypes: tuple[str, ...]) -> tuple[str, ...]:
        whole = integer_result(self.fn, in_dtypes, INTEGER_UNARY)
        return (whole,) if whole is not None else super().out_dtypes(in_dtypes)

    @property
    def label(self) -> str:
        return self.name or self.fn


@register_op
@attrs.frozen
class Activation(Op):
    """An elementwise activation with constants of its own, as torch defines it:
    ``leaky_relu``: ``x`` where ``x >= 0``, else ``alpha x``; ``elu``: ``x`` where ``x > 0``,
    else ``alpha (exp(x) - 1)``; ``celu``: ``max(0, x) + min(0, alpha (exp(x / alpha) - 1))``
    (``alpha != 0``); ``softplus``: ``log(1 + exp(beta x)) / beta``, or ``x`` where
    ``beta x > threshold`` (``beta`` is ``alpha`` here, ``threshold`` is ``beta``)."""

    kind: ClassVar[str] = "activation"
    category: ClassVar[str] = "elementwise"
    fn: str = choice_field(ACTIVATION_FNS)
    alpha: float = number_field(1.0, fix="pass a finite constant such as 0.01 or 1.0")
    beta: float = number_field(0.0, fix="pass a finite threshold such as 20.0")

    def __attrs_post_init__(self) -> None:
        if self.fn in ("celu", "softplus") and self.alpha == 0.0:
            what = "alpha" if self.fn == "celu" else "beta"
            raise DefinitionError(
                f"{self.fn}: {what} must not be 0 (it divides). Fix: pass {what}=1.0, torch's "
                "default."
            )

    def signature(self) -> Signature:
        return ((),), ((),)

    @property
    def label(self) -> str:
        if self.name:
            return self.name
        if self.fn == "softplus":
            return "softplus" if self.alpha == 1.0 else f"softplus {self.alpha:g}"
        return f"{self.fn} {self.alpha:g}"


@register_op
@attrs.frozen
class Binary(Op):
    """An elementwise function of two inputs (broadcast over the union of their axes)."""

    kind: ClassVar[str] = "binary"
    category: ClassVar[str] = "elementwise"
    promotes_integers: ClassVar[bool] = True
    fn: str = choice_field(BINARY_FNS)

    def signature(self) -> Signature:
        return ((), ()), ((),)

    def accepts(self, k: int, dtype: str) -> bool:
        return True  # floats, bools (0.0 / 1.0) and integers (integer arithmetic, as torch's)

    def out_dtypes(self, in_dtypes: tuple[str, ...]) -> tuple[str, ...]:
        if self.fn in COMPARISONS:
            return (bool_,)
        whole = integer_result(self.fn, in_dtypes, INTEGER_FNS)
        if whole is not None:
            return (whole,)
        if self.dtype is None and not any(to_dtype(d).kind == "float" for d in in_dtypes):
            return (self.format,)  # a quotient or power of integers: float32, as torch's
        return super().out_dtypes(in_dtypes)

    @property
    def label(self) -> str:
        return self.name or self.fn


@register_op
@attrs.frozen
class Scalar(Op):
    """``x fn const`` (or ``const fn x`` when ``reverse``), elementwise."""

    kind: ClassVar[str] = "scalar"
    category: ClassVar[str] = "elementwise"
    promotes_integers: ClassVar[bool] = True
    fn: str = choice_field(BINARY_FNS)
    const: float = number_field(
        fix="pass a finite constant (mask with ops.causal_mask, not an infinite constant)"
    )
    reverse: bool = flag_field(False)

    def signature(self) -> Signature:
        return ((),), ((),)

    def accepts(self, k: int, dtype: str) -> bool:
        return True  # floats, bools (0.0 / 1.0) and integers (integer arithmetic, as torch's)

    def out_dtypes(self, in_dtypes: tuple[str, ...]) -> tuple[str, ...]:
        if self.fn in COMPARISONS:
            return (bool_,)
        if self.whole is not None:
            whole = integer_result(self.fn, in_dtypes, INTEGER_FNS)
            if whole is not None:
                return (whole,)
        if self.dtype is None and not any(to_dtype(d).kind == "float" for d in in_dtypes):
            return (self.format,)  # ids * 0.5, ids / 2: float32, as torch's
        return super().out_dtypes(in_dtypes)

    @property
    def whole(self) -> int | None:
        """The constant as an int where it takes part in integer arithmetic (a whole number in
        range, ``fn`` in ``INTEGER_FNS``): every interpreter keeps an integer operand an integer
        with it. ``None`` otherwise."""
        c = self.const
        return int(c) if self.fn in INTEGER_FNS and c.is_integer() and abs(c) < 2.0**63 else None

    @property
    def label(self) -> str:
        return self.name or (
            f"{self.const:g} {self.fn}" if self.reverse else f"{self.fn} {self.const:g}"
        )


@register_op
@attrs.frozen
class Scale(Op):
    """Multiply by ``prod(size(a) for a in by) ** power`` (e.g. attention's 1/sqrt(d))."""

    kind: ClassVar[str] = "scale"
    category: ClassVar[str] = "elementwise"
    by: tuple[Axis, ...] = axes_field()
    power: float = number_field(-0.5)

    def signature(self) -> Signature:
        return ((),), ((),)

    @property
    def label(self) -> str:
        return self.name or f"scale |{' '.join(a.name for a in self.by)}|^{self.power:g}"


@register_op
@attrs.frozen
class Reduce(Op):
    """Sum, max, min, mean, product or ``logsumexp`` (``log sum exp``, the maximum shifted out
    first) over ``axes``."""

    kind: ClassVar[str] = "reduce"
    category: ClassVar[str] = "reduction"
    fn: str = choice_field(REDUCE_FNS)
    axes_: tuple[Axis, ...] = axes_field()

    def signature(self) -> Signature:
        return (self.axes_,), ((),)

    @property
    def label(self) -> str:
        return self.name or self.fn


@register_op
@attrs.frozen
class Softmax(Op):
    """``exp(x_i - max x) / sum_j exp(x_j - max x)`` over one axis."""

    kind: ClassVar[str] = "softmax"
    category: ClassVar[str] = "normaliser"
    axis: Axis = axis_field()

    def signature(self) -> Signature:
        return ((self.axis,),), ((self.axis,),)


@register_op
@attrs.frozen
class L2Norm(Op):
    """``x_i / sqrt(sum_j x_j^2 + eps)`` over one axis (the spherical-attention normaliser)."""

    kind: ClassVar[str] = "l2norm"
    category: ClassVar[str] = "normaliser"
    axis: Axis = axis_field()
    eps: float = number_field(1e-12, low=0.0, fix=_EPS_FIX)

    def signature(self) -> Signature:
        return ((self.axis,),), ((self.axis,),)


@register_op
@attrs.frozen
class LayerNorm(Op):
    """Layer normalisation over ``axes_`` with optional learned scale and shift."""

    kind: ClassVar[str] = "layernorm"
    category: ClassVar[str] = "normaliser"
    axes_: tuple[Axis, ...] = axes_field()
    eps: float = number_field(1e-5, low=0.0, fix=_EPS_FIX)
    affine: bool = flag_field(True)
    bias: bool = flag_field(True)

    def signature(self) -> Signature:
        return (self.axes_,), (self.axes_,)

    def params(self) -> tuple[Param, ...]:
        if not self.affine:
            return ()
        w = Param("weight", self.axes_, "ones")
        return (w, Param("bias", self.axes_, "zeros")) if self.bias else (w,)


@register_op
@attrs.frozen
class RMSNorm(Op):
    """Root-mean-square normalisation over ``axes_`` with an optional learned scale."""

    kind: ClassVar[str] = "rmsnorm"
    category: ClassVar[str] = "normaliser"
    axes_: tuple[Axis, ...] = axes_field()
    eps: float = number_field(1e-6, low=0.0, fix=_EPS_FIX)
    affine: bool = flag_field(True)

    def signature(self) -> Signature:
        return (self.axes_,), (self.axes_,)

    def params(self) -> tuple[Param, ...]:
        return (Param("weight", self.axes_, "ones"),) if self.affine else ()


@register_op
@attrs.frozen
class CausalMask(Op):
    """Set scores with key index ``j > i + (|x| - |q|)`` to ``-inf`` (query ``q``, key ``x``)."""

    kind: ClassVar[str] = "causal_mask"
    category: ClassVar[str] = "elementwise"
    q: Axis = axis_field()
    x: Axis = axis_field()
    fill: str = choice_field(("-inf", "0"), "-inf")

    def __attrs_post_init__(self) -> None:
        if self.q == self.x:
            raise DefinitionError(
                f"causal_mask: the query and key axes are one axis {self.q.describe()}. Fix: "
                "rename the key axis (ops.rename) so scores are [q x]."
            )

    def signature(self) -> Signature:
        return ((self.q, self.x),), ((self.q, self.x),)


@register_op
@attrs.frozen
class Embedding(Op):
    """Look up integer ids in a learned table of axes ``(vocab, *out_axes)``."""

    kind: ClassVar[str] = "embedding"
    category: ClassVar[str] = "other"
    vocab: Axis = axis_field()
    out_axes: tuple[Axis, ...] = axes_field()

    def __attrs_post_init__(self) -> None:
        if self.vocab in self.out_axes:
            raise DefinitionError(
                f"embedding: the table axis {self.vocab.describe()} is also an output axis. "
                "Fix: give the vectors their own axis, e.g. 'vocab -> d_model'."
            )

    def signature(self) -> Signature:
        return ((),), (self.out_axes,)

    def params(self) -> tuple[Param, ...]:
        return (Param("weight", (self.vocab, *self.out_axes), "normal"),)

    def in_dtypes(self) -> tuple[str, ...]:
        return ("int64",)

    def out_dtypes(self, in_dtypes: tuple[str, ...]) -> tuple[str, ...]:
        return (self.format,)


@register_op
@attrs.frozen
class Cast(Op):
    """Convert a value to the format ``to``, as torch's ``.to(dtype)``: floats round to nearest
    even (overflow gives inf, or NaN in float8_e4m3fn, which has no inf); integers and bools
    become floats or wider integers; a float becomes an integer by truncation toward zero,
    saturating at the integer's range, NaN giving 0 (torch leaves NaN and overflow undefined);
    anything becomes a bool as ``x != 0`` (NaN is true). Narrowing integer casts are refused
    at lowering: wrap-around would change values silently. The only place two formats meet."""

    kind: ClassVar[str] = "cast"
    category: ClassVar[str] = "elementwise"
    to: DType = attrs.field(converter=to_dtype)

    def signature(self) -> Signature:
        return ((),), ((),)

    def accepts(self, k: int, dtype: str) -> bool:
        src = to_dtype(dtype)
        if self.to.kind != "int" or src.kind != "int":
            return True
        return src.itemsize <= self.to.itemsize

    def refusal(self, k: int, dtype: str) -> tuple[str, str]:
        src = to_dtype(dtype)
        return (
            f"converts to {self.to.name}, narrower than {src.name} (values would wrap around)",
            f"cast to a format at least as wide as {src.name}",
        )

    def float_format(self, in_dtypes: tuple[str, ...]) -> DType | None:
        return None  # a conversion: the input may have any format

    def out_dtypes(self, in_dtypes: tuple[str, ...]) -> tuple[str, ...]:
        return (self.to,)

    @property
    def label(self) -> str:
        return self.name or f"cast {self.to.name}"


@register_op
@attrs.frozen
class Dropout(Op):
    """Identity at inference; in training, zero each element with probability ``p``.

    ``seed``: dropout always on, its mask drawn by ``ncd.counter_rng`` from the seed and each
    element's position, so every backend (and the backward pass) draws the same mask."""

    kind: ClassVar[str] = "dropout"
    category: ClassVar[str] = "elementwise"
    p: float = number_field(
        0.1,
        low=0.0,
        high=1.0,
        high_open=True,
        fix="pass a drop probability in [0, 1) (p=0 disables dropout)",
    )
    seed: int | None = attrs.field(default=None)

    @seed.validator
    def _check_seed(self, attribute: object, value: object) -> None:
        if value is not None and (
            isinstance(value, bool) or not isinstance(value, int) or not 0 <= value < 2**32
        ):
            raise DefinitionError(
                f"dropout op: seed must be None or an int in [0, 2^32), got {value!r}. Fix: "
                "pass e.g. seed=0 (None: the backend's training mode decides)."
            )

    def signature(self) -> Signature:
        return ((),), ((),)


@register_op
@attrs.frozen
class View(Op):
    """Split, merge, rename or permute axes without touching data.

    ``in_parts[i]`` lists the elementary axes that ``in_axes[i]`` is made of (in row-major
    order); ``out_parts`` likewise. The elementary axes on both sides are the same set.
    """

    kind: ClassVar[str] = "view"
    category: ClassVar[str] = "view"
    in_axes: tuple[Axis, ...] = axes_field()
    out_axes: tuple[Axis, ...] = axes_field()
    in_parts: tuple[tuple[Axis, ...], ...] = groups_field()
    out_parts: tuple[tuple[Axis, ...], ...] = groups_field()
    derived: tuple[Axis, ...] = axes_field(default=())

    def __attrs_post_init__(self) -> None:
        if len(self.in_parts) != len(self.in_axes) or len(self.out_parts) != len(self.out_axes):
            raise DefinitionError(
                f"view {self.label!r}: one part per axis is required. Fix: give in_parts and "
                "out_parts one tuple of elementary axes for each axis."
            )
        left = [a for g in self.in_parts for a in g]
        right = [a for g in self.out_parts for a in g]
        if sorted(a.uid for a in left) != sorted(a.uid for a in right) or len(set(left)) != len(
            left
        ):
            raise DefinitionError(
                f"view {self.label!r}: elementary axes differ: {[a.name for a in left]} vs "
                f"{[a.name for a in right]}. Fix: every part must appear once on each side."
            )
        for side in (self.in_axes, self.out_axes):
            if len(set(side)) != len(side):
                raise DefinitionError(
                    f"view {self.label!r}: an axis appears twice on one side "
                    f"({[a.name for a in side]}). Fix: name each axis once per side."
                )

    def signature(self) -> Signature:
        return (self.in_axes,), (self.out_axes,)

    def accepts(self, k: int, dtype: str) -> bool:
        return True  # a view moves elements of any type

    def out_dtypes(self, in_dtypes: tuple[str, ...]) -> tuple[str, ...]:
        return in_dtypes

    def constraints(self) -> tuple[Product, ...]:
        out = []
        for axis, part in (*zip(self.in_axes, self.in_parts), *zip(self.out_axes, self.out_parts)):
            if part != (axis,):
                out.append(Product(axis, part))
        return tuple(out)

    def derived_axes(self) -> tuple[Axis, ...]:
        return self.derived

    @property
    def elementary(self) -> tuple[Axis, ...]:
        return tuple(a for g in self.in_parts for a in g)

    @property
    def label(self) -> str:
        if self.name:
            return self.name
        if len(self.in_axes) == len(self.out_axes) == 1 and self.in_parts == self.out_parts:
            return "rename"
        return "view"


@register_op
@attrs.frozen
class Constant(Op):
    """A constant array filled with ``value`` over ``axes_`` (a scalar when empty)."""

    kind: ClassVar[str] = "constant"
    category: ClassVar[str] = "source"
    value: float = number_field(fix="pass a finite value")
    axes_: tuple[Axis, ...] = axes_field(default=())

    def signature(self) -> Signature:
        return (), (self.axes_,)

    @property
    def label(self) -> str:
        return self.name or f"const {self.value:g}"


@register_op
@attrs.frozen
class Learned(Op):
    """A learned array over ``axes_`` (e.g. positional embeddings), output as a value."""

    kind: ClassVar[str] = "learned"
    category: ClassVar[str] = "source"
    axes_: tuple[Axis, ...] = axes_field()
    init: str = choice_field(("normal", "zeros", "ones"), "normal")

    def signature(self) -> Signature:
        return (), (self.axes_,)

    def params(self) -> tuple[Param, ...]:
        return (Param("weight", self.axes_, self.init),)


def _param_name(instance: Any, attribute: Any, value: Any) -> None:
    """A parameter's own name: ``weight``, ``bias``, ``running_mean``, or torch's recurrent
    ``weight_ih_l0_reverse`` (lower-case letters, digits and underscores)."""
    if not isinstance(value, str) or not re.fullmatch(r"[a-z][a-z0-9_]{0,63}", value):
        raise DefinitionError(
            f"parameter: its name must be lower-case letters, digits and underscores (at most "
            f"64, a letter first), got {show(value)}. Fix: e.g. param='weight_ih_l0'."
        )


@register_op
@attrs.frozen
class Parameter(Learned):
    """One named parameter (``weight``, ``bias``, a batch norm's running statistics) of another
    op, output as a value: ``ncd.grad`` reads a linear map's or a norm's parameters through it,
    under the owner's parameter names (a ``Learned`` whose parameter may be a bias). Its
    initialiser is ``Learned``'s (a fan-in uniform one becomes ``normal``): initialise from the
    model."""

    kind: ClassVar[str] = "parameter"
    #: the weight and the bias of one op share its parameter path (see ``Builder._path``)
    shares_path: ClassVar[bool] = True
    param: str = attrs.field(default="weight", validator=_param_name)
    buffer: bool = flag_field(False)  # a state array (running statistics): read, not learned

    def params(self) -> tuple[Param, ...]:
        return (Param(self.param, self.axes_, self.init, buffer=self.buffer),)

    @property
    def label(self) -> str:
        return self.name or self.param
